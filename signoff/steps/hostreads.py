"""Asking a host about a whole batch at once, where it can answer so (docs/plugins.md).

A host may offer ``get_many``, ``receipts`` and ``submit_many`` beside the
single calls; each is optional. signoff uses them for a claimed batch (one
round trip, and for a host that commits, one commit, instead of one per row)
and falls back to the single calls for a host without them. A record a batch
read leaves out is asked again with ``get``, which names its own error, so a
batch answer can only spare calls, never change an outcome.
"""

from .. import tracing
from ..errors import Blocked
from ..hosts.contract import Capability, supports
from ..rules.records import check_material


class BatchReads:
    """The host as one batch sees it: records read together, materials once per document.

    Every other attribute is the host's own. A ``get_many`` that fails is the
    failure of the read that asked for it (one refused, ``Blocked``, is not: that
    read asks ``get``); the reads after it go one by one. The batch read is a
    ``signoff.reads`` span of its own, linked to ``rows`` (the batch's deliveries or
    tasks), not a part of the trace of the row that happened to ask first.
    """

    def __init__(self, host, record_ids, rows=()):
        self.host, self._rows = host, rows
        wanted = set(record_ids)
        # One record is one call either way: ``get`` keeps it in its row's trace.
        self._wanted = wanted if len(wanted) > 1 and supports(host, Capability.GET_MANY) else set()
        self._records = None
        self._materials, self._usable = {}, set()

    def get(self, record_id):
        """The record, from the batch's one read where it covers ``record_id``."""
        if record_id in self._wanted:
            if self._records is None:
                self._records = {}  # a failure below is not asked again for the others
                try:
                    with tracing.span("signoff.reads", links=self._rows, root=True,
                                      count=len(self._wanted)):
                        self._records = self.host.get_many(sorted(self._wanted))
                except Blocked:
                    pass  # a refusal of the whole batch: each row's ``get`` names its own
            if record_id in self._records:
                return self._records[record_id]
        return self.host.get(record_id)

    def read_material(self, document):
        """The material of ``document``, read once for the batch."""
        if document not in self._materials:
            self._materials[document] = self.host.read_material(document)
        return self._materials[document]

    def material(self, document, max_bytes):
        """The material of ``document``, read and found usable once for the batch
        (``check_material``: it raises ``InvalidRecord`` for each row that asks)."""
        material = self.read_material(document)
        if document not in self._usable:
            check_material(material, max_bytes)
            self._usable.add(document)
        return material

    def __getattr__(self, name):
        return getattr(self.host, name)


def receipts(host, tasks, spans, renew):
    """``{key: receipt, None, or the exception that stopped its read}`` for ``tasks``.

    ``spans`` are the tasks' submit spans (tracing.py): a single read is a
    ``signoff.receipt`` span in its task's trace; a batch read is a span of its
    own, linked to every task it covers. ``renew`` keeps the batch's leases
    and is called before each call.
    """
    if not supports(host, Capability.RECEIPTS) or len(tasks) == 1:
        return {t.key: _receipt(host, t.key, spans.get(t.key), renew) for t in tasks}
    renew()
    try:
        with tracing.span("signoff.receipts", links=tasks, count=len(tasks)):
            found = host.receipts([t.key for t in tasks])
    except Exception as exc:
        return {t.key: exc for t in tasks}
    return {t.key: found.get(t.key) for t in tasks}


def submit(host, tasks, spans, renew):
    """``{key: None when written (or already held), else the exception}`` for ``tasks``.

    Each is submitted under its key with its record and result; a batch that
    fails as a whole (a timeout, a lost acknowledgement) fails every task in it.
    """
    if not supports(host, Capability.SUBMIT_MANY) or len(tasks) == 1:
        return {t.key: _submitted(host, t, spans.get(t.key), renew) for t in tasks}
    renew()
    try:
        with tracing.span("signoff.submits", links=tasks, count=len(tasks)):
            refused = host.submit_many([(t.key, t.record, t.result) for t in tasks])
    except Exception as exc:
        return {t.key: exc for t in tasks}
    return {t.key: Blocked(refused[t.key], f"the host refused the write: {refused[t.key]}")
            if t.key in refused else None for t in tasks}


def _receipt(host, key, span, renew):
    renew()
    with tracing.current(span), tracing.span("signoff.receipt", task_key=key) as inner:
        try:
            receipt = host.receipt(key)
        except Exception as exc:
            return exc
        tracing.annotate(inner, status="none" if receipt is None else "found")
        return receipt


def _submitted(host, task, span, renew):
    renew()
    with tracing.current(span):
        try:
            host.submit(task.key, task.record, task.result)
        except Exception as exc:
            return exc
    return None
