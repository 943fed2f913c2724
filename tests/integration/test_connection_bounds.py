"""Every connection to a server bounds its wait for an answer (``storage.net``): the
options are read back from the real sockets signoff opened, and from the server."""

import contextlib
import os
import socket

import pytest

from signoff.app import Signoff
from signoff.storage import net
from signoff.storage.urls import kind_of

WANTED = {socket.TCP_KEEPIDLE: net.KEEPALIVE_IDLE_S, socket.TCP_KEEPINTVL: net.KEEPALIVE_INTERVAL_S,
          socket.TCP_KEEPCNT: net.KEEPALIVE_COUNT,
          socket.TCP_USER_TIMEOUT: net.USER_TIMEOUT_S * 1000}


def tcp_options(fd):
    """SO_KEEPALIVE and the TCP options of the socket ``fd`` (a duplicate is inspected)."""
    with contextlib.closing(socket.socket(fileno=os.dup(fd))) as sock:
        return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                {option: sock.getsockopt(socket.IPPROTO_TCP, option) for option in WANTED})


@pytest.fixture
def server_rt(home, backend):
    if backend is None:
        pytest.skip("needs a server backend (the backend stages)")
    rt = Signoff.init(home)
    yield rt
    rt.close()


def test_the_state_database_bounds_both_ends_of_its_connection(server_rt, backend):
    if not backend.database_url:
        pytest.skip("the state is the SQLite file here")
    conn = server_rt.database.connection()
    keepalive, options = tcp_options(conn.pgconn.socket)
    assert keepalive == 1 and options == WANTED
    shown = {name: server_rt.database.execute_sql(f"SHOW {name}").fetchone()[0]
             for name in ("tcp_keepalives_idle", "tcp_user_timeout", "lock_timeout")}
    assert shown == {"tcp_keepalives_idle": str(net.KEEPALIVE_IDLE_S),
                     "tcp_user_timeout": str(net.USER_TIMEOUT_S * 1000), "lock_timeout": "10s"}


def test_the_queue_bounds_its_connections(server_rt, backend):
    if not backend.queue_url:
        pytest.skip("the queue is the SQLite file here")
    storage = server_rt.queue.storage
    if kind_of(backend.queue_url) == "redis":
        conn = storage.pool.get_connection()
        try:
            conn.connect()
            assert conn.socket_timeout == net.REDIS_READ_TIMEOUT_S
            keepalive, options = tcp_options(conn._sock.fileno())
        finally:
            storage.pool.release(conn)
    else:
        keepalive, options = tcp_options(storage.conn.pgconn.socket)
        assert storage.conn.execute("SHOW tcp_user_timeout").fetchone()[0] == \
            str(net.USER_TIMEOUT_S * 1000)
    assert keepalive == 1 and options == WANTED
