"""Running ``signoff serve``: one uvicorn server on a socket we bind ourselves.

uvicorn handles SIGTERM and SIGINT: it stops accepting connections, answers
the requests in flight (up to ``GRACEFUL_S``), then the app's shutdown writes
what the group commit still holds.
"""

import copy
import json
import logging
import signal
import socket

import uvicorn

from .logins import Logins
from .site import Site
from ..config import serve_settings
from .web import build_app

GRACEFUL_S = 30
# uvicorn's logging, with the access lines on stderr instead of standard output.
LOG_CONFIG = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
LOG_CONFIG["handlers"]["access"]["stream"] = "ext://sys.stderr"


def bind_socket(host, port):
    """A listening TCP socket on ``host:port`` (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that
    # say they are TCP, and without it each answer waits ~40 ms for an ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:  # the address goes where a path would: the operator's to fix
        sock.close()
        raise OSError(exc.errno, exc.strerror, f"{host}:{port}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run(home=None, host="127.0.0.1", port=8080, secure_cookies=None, access_log=False,
        site=Site):
    """Serve ``home`` until SIGTERM/SIGINT; prints one JSON line once listening.

    With ``access_log`` uvicorn logs one line per request on stderr (standard
    output carries only the JSON lines). ``site`` opens the home: ``Site``, or a
    subclass of it (the demo's dying serve).
    """
    rt = site(home)
    settings = serve_settings(rt.home)
    secure = settings["secure_cookies"] if secure_cookies is None else secure_cookies
    logins = Logins(settings["login_failures"], float(settings["login_window_s"]),
                    settings["login_client_failures"])
    app = build_app(rt, secure_cookies=secure, logins=logins)
    sock = bind_socket(host, port)
    actual = sock.getsockname()[1]
    # X-Forwarded-* are believed only from the proxies named: by default from
    # nobody, or any client could pick the address it is throttled under.
    proxies = settings["trusted_proxies"].strip()
    config = uvicorn.Config(app, lifespan="on", access_log=access_log, log_level="warning",
                            log_config=LOG_CONFIG, server_header=False,
                            timeout_graceful_shutdown=GRACEFUL_S, proxy_headers=bool(proxies),
                            forwarded_allow_ips=proxies or None)
    if access_log:  # log_level quiets uvicorn's own lines, not the access lines asked for
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    server = uvicorn.Server(config)
    for signum in (signal.SIGTERM, signal.SIGINT):
        # Until uvicorn takes the signals over, one asks it to stop as soon as it
        # has started (a supervisor may stop us the moment we say we listen).
        # uvicorn re-raises the signal after its graceful stop; it lands here
        # too, so a graceful stop exits 0 with its summary instead of dying of it.
        signal.signal(signum, lambda *_: setattr(server, "should_exit", True))
    shown = f"[{host}]" if ":" in host else host
    print(json.dumps({"listening": f"http://{shown}:{actual}", "home": str(rt.home)}), flush=True)
    server.run(sockets=[sock])
    rt.close()  # sends what the last webhooks announced, then closes the connections
    return {"stopped": "signal", "port": actual}
