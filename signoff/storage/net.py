"""How long a PostgreSQL or Redis connection may stay silent before it counts as dead.

A server that vanishes without a word (a switch, a security group, a VM
migration, a failover) sends no reset and no ICMP: a socket waiting for its
answer waits until TCP gives up, which with the kernel's defaults is two hours
of keepalive silence, or some fifteen minutes of retransmissions. A worker
waiting there keeps its pid, so no supervisor restarts it, while its heartbeat
ages and its leases pass to others. Server-side timeouts do not help: a server
that lost the session cannot enforce them.

So every connection to a server sets these bounds itself, at both ends where
the protocol allows: TCP keepalives (an idle connection is probed after
``KEEPALIVE_IDLE_S`` and declared dead after ``KEEPALIVE_COUNT`` unanswered
probes) and ``TCP_USER_TIMEOUT`` (data, probes included, left unacknowledged
for ``USER_TIMEOUT_S`` ends the connection). A silent peer is found within
about ``KEEPALIVE_IDLE_S + USER_TIMEOUT_S`` seconds whatever the connection
was doing; a query the server is still working on keeps its connection, since
the server's kernel answers the probes. PostgreSQL gets the same settings for
its end of each session, so a server whose client vanished mid-transaction
ends the session and releases its locks within seconds too, rather than after
``idle_in_transaction_session_timeout``. A connection found dead is replaced by
the caller (``faults.retrying``, the Redis client's retry, Huey's next poll).
"""

import socket

CONNECT_TIMEOUT_S = 5  # a connect whose SYN or handshake gets no answer
KEEPALIVE_IDLE_S = 2  # silence before the first keepalive probe
KEEPALIVE_INTERVAL_S = 1  # between probes
KEEPALIVE_COUNT = 3  # unanswered probes that end a connection (without a user timeout)
USER_TIMEOUT_S = 5  # unacknowledged data, probes included, that ends a connection
# Redis answers every command at once but a blocking pop, which Huey bounds to
# one second (its read_timeout): a reply later than this is a dead connection.
REDIS_READ_TIMEOUT_S = 5
# A Redis command that met a dead connection is sent again on a new one this
# many times, after pauses from REDIS_RETRY_PAUSE_S (base, cap): a wake-up sent
# twice or a pop lost costs nothing, the rows being the truth.
REDIS_RETRIES = 2
REDIS_RETRY_PAUSE_S = (0.05, 0.5)


def libpq_params():
    """Connection parameters for libpq (psycopg): the client's end of the bounds."""
    return {"connect_timeout": CONNECT_TIMEOUT_S, "keepalives": 1,
            "keepalives_idle": KEEPALIVE_IDLE_S, "keepalives_interval": KEEPALIVE_INTERVAL_S,
            "keepalives_count": KEEPALIVE_COUNT, "tcp_user_timeout": USER_TIMEOUT_S * 1000}


def postgres_server_settings():
    """PostgreSQL session settings for the server's end of the same bounds (ignored by
    the server on a Unix socket)."""
    return {"tcp_keepalives_idle": KEEPALIVE_IDLE_S,
            "tcp_keepalives_interval": KEEPALIVE_INTERVAL_S,
            "tcp_keepalives_count": KEEPALIVE_COUNT, "tcp_user_timeout": USER_TIMEOUT_S * 1000}


def tcp_keepalive_options():
    """``{option: value}`` at the ``IPPROTO_TCP`` level for a socket with SO_KEEPALIVE on:
    the same bounds, for clients that set socket options themselves (redis-py). An
    option this platform lacks is left out."""
    wanted = {"TCP_KEEPIDLE": KEEPALIVE_IDLE_S, "TCP_KEEPINTVL": KEEPALIVE_INTERVAL_S,
              "TCP_KEEPCNT": KEEPALIVE_COUNT, "TCP_USER_TIMEOUT": USER_TIMEOUT_S * 1000}
    return {getattr(socket, name): value for name, value in wanted.items()
            if hasattr(socket, name)}


def redis_params(redis, url):
    """Keyword arguments for redis-py's ``ConnectionPool.from_url(url, ...)``.

    Every one explicit: redis-py 5 waits for a reply forever by default and
    does not retry; 8 waits five seconds and retries three times with pauses up
    to ten seconds, so a thread could sit out a healed network in its backoff.
    A Unix socket takes no TCP options.
    """
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry
    base, cap = REDIS_RETRY_PAUSE_S
    params = {"socket_connect_timeout": CONNECT_TIMEOUT_S,
              "socket_timeout": REDIS_READ_TIMEOUT_S,
              "retry": Retry(ExponentialBackoff(cap=cap, base=base), REDIS_RETRIES),
              "retry_on_error": [redis.exceptions.ConnectionError,
                                 redis.exceptions.TimeoutError]}
    if not url.startswith("unix://"):
        params.update(socket_keepalive=True, socket_keepalive_options=tcp_keepalive_options())
    return params
