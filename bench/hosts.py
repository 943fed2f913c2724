"""Hosts the bench runs signoff against besides the reference host."""

from signoff.hosts.reference import ReferenceHost


class OneWriteHost(ReferenceHost):
    """The reference host without its batch write: each result is a ``submit`` call
    and a host commit of its own, as many real hosts take them and as plain Huey's
    job writes them (``python -m bench --one-write-host``)."""

    submit_many = None  # not callable: signoff asks ``submit`` for each task


FACTORY = "bench.hosts:OneWriteHost"
