"""``python -m bench --http``: webhook ingest of ``signoff serve`` against a bare endpoint.

One load generator (a plain HTTP/1.1 client on asyncio streams, loopback
only, every loop bounded by a count; ``_load`` says why not a general client)
drives, in one run: a bare endpoint on the same server stack (uvicorn +
Starlette, same middleware) that reads the body and answers 202; then
``signoff serve`` with the same number of signed events (verified, deduped,
group-committed, durable before the 202); before both, a *durable* bare
endpoint on the same stack, the least a receiver that keeps its promise does
(verify, store the body under its ``webhook-id``, commit, answer 202; its rows
are counted afterwards); then badly signed requests (each
must be 401); then a paced run at half the rate signoff reached, for latency,
and the bare endpoint paced the same (the machine's own tail, for comparison).
Finally every 202 is looked up in the database: none may be lost. The home
is SQLite, whatever the environment's backend overrides say.
"""

import asyncio
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from . import cpu_s, reads
from .backends import BenchBackend, backend_env_set_aside

EVENTS = 20_000
CLIENTS = 50
TARGET_RATIO = 0.85
TARGET_P99_MS = 100.0


def bare_app():
    """The bare endpoint: same stack and middleware, answers 202 and does nothing."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from signoff.serve.web import SecurityHeaders

    async def hook(request):
        await request.body()
        return JSONResponse({"accepted": True}, status_code=202)
    return SecurityHeaders(Starlette(routes=[Route("/hooks/{monitor}", hook, methods=["POST"])]))


def durable_app(path, secret):
    """The least a receiver that keeps its promise does, on the same stack: verify the
    signature, then store the body under its ``webhook-id`` (a repeat is stored once)
    in SQLite as signoff's state is stored (WAL, ``synchronous=FULL``), committed
    before the 202. One connection, one commit per request, in the loop's thread."""
    import sqlite3

    from standardwebhooks.webhooks import Webhook, WebhookVerificationError
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from signoff.serve.web import SecurityHeaders

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS delivery (webhook_id TEXT PRIMARY KEY, body BLOB)")
    hook_of = Webhook(secret)

    async def hook(request):
        body = await request.body()
        try:
            hook_of.verify(body, request.headers)
        except WebhookVerificationError:
            return JSONResponse({"error": "bad_signature"}, status_code=401)
        conn.execute("INSERT OR IGNORE INTO delivery VALUES (?, ?)",
                     (request.headers["webhook-id"], body))
        return JSONResponse({"accepted": True}, status_code=202)
    return SecurityHeaders(Starlette(routes=[Route("/hooks/{monitor}", hook, methods=["POST"])]))


def serve_bare(port=0, durable=None):
    """Run the bare endpoint until SIGTERM, as ``signoff serve`` runs (same uvicorn options).

    ``durable``: ``(database path, secret)`` to run ``durable_app`` instead.
    """
    import uvicorn

    from signoff.serve.server import GRACEFUL_S, bind_socket
    sock = bind_socket("127.0.0.1", port)
    print(json.dumps({"listening": f"http://127.0.0.1:{sock.getsockname()[1]}"}), flush=True)
    app = bare_app() if durable is None else durable_app(*durable)
    config = uvicorn.Config(app, lifespan="off", access_log=False, log_level="warning",
                            server_header=False, timeout_graceful_shutdown=GRACEFUL_S)
    uvicorn.Server(config).run(sockets=[sock])


def _start(argv, env=None):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=None if env is None else dict(os.environ, **env))
    line = proc.stdout.readline()  # the server prints one line once it listens
    if not line:
        proc.wait(30)
        raise RuntimeError(f"{argv[2:]} did not start (exit {proc.returncode})")
    return proc, json.loads(line)["listening"]


def _stop(proc):
    proc.terminate()
    proc.wait(60)
    proc.stdout.close()


def events_for(count, prefix):
    """``count`` ``(webhook-id, body)`` pairs of distinct events."""
    now = int(time.time())
    return [(f"{prefix}-{i}", json.dumps({
        "event_id": f"{prefix}-{i}", "name": "comment.created", "document": "doc-bench",
        "record_id": f"r-{i % 1000}", "occurred": now})) for i in range(count)]


def signer(secret, bad=False):
    """``sign(webhook_id, body) -> headers`` stamped at the moment of sending.

    Signing as each request goes keeps long runs inside the 5-minute tolerance;
    the bare endpoint's run signs too, so both pay the same client cost.
    """
    from standardwebhooks.webhooks import Webhook
    hook = Webhook(secret)

    def sign(msg_id, body):
        now = datetime.datetime.now(datetime.timezone.utc)
        signature = hook.sign(msg_id, now, body)
        if bad:
            signature = "v1,AAAA" + signature[7:]
        return {"webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
                "webhook-signature": signature, "content-type": "application/json"}
    return sign


async def _load(url, requests, sign, clients, rate=None):
    """Send ``requests`` over ``clients`` kept-alive connections; the figures of the pass.

    A plain HTTP/1.1 client on asyncio streams: a general client (httpx) spent
    4-6 ms of CPU a request, so one load process saturated its core while the
    server idled at a fifth of one, and the ratio measured the client. This one
    spends a twentieth of that, so the server is what a pass measures (the
    ``load_cpu_ms_per_request`` and ``busy`` figures show which side it was).
    """
    address = urlsplit(url)
    latencies, statuses, answers = [], {}, []
    start = time.perf_counter()

    async def one_client(first):
        conn = None
        try:
            for i in range(first, len(requests), clients):
                if rate:
                    delay = start + i / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                msg_id, body = requests[i]
                t0 = time.perf_counter()
                try:
                    conn = conn or await _connect(address.hostname, address.port)
                    status, answer = await _post(conn, address.netloc, sign(msg_id, body), body)
                except (OSError, EOFError, ValueError) as exc:  # counted: no answer, no promise
                    name = type(exc).__name__
                    statuses[name] = statuses.get(name, 0) + 1
                    _close(conn)
                    conn = None
                    continue
                latencies.append(time.perf_counter() - t0)
                statuses[status] = statuses.get(status, 0) + 1
                if status == 202 and b'"delivery"' in answer:
                    answers.append(json.loads(answer)["event_id"])
        finally:
            _close(conn)
    await asyncio.gather(*(one_client(n) for n in range(clients)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {"requests": len(requests), "seconds": round(elapsed, 3),
            "per_s": round(len(requests) / elapsed, 1), "statuses": statuses,
            "p50_ms": _quantile_ms(latencies, 0.5), "p99_ms": _quantile_ms(latencies, 0.99),
            "accepted_ids": answers}


def _quantile_ms(ordered, q):
    """The ``q`` quantile of ``ordered`` seconds in milliseconds; None when no request got
    an answer."""
    if not ordered:
        return None
    return round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * q))], 2)


async def _connect(host, port):
    reader, writer = await asyncio.open_connection(host, port)
    # Without TCP_NODELAY a request split over two segments waits for the first's
    # ACK (Nagle + delayed ACK: ~40 ms), which would measure the kernel.
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


def _close(conn):
    if conn is not None:
        conn[1].close()


async def _post(conn, netloc, headers, body):
    """POST ``body`` to ``/hooks/bench`` on ``conn``; ``(status, answer body)``.

    Raises EOFError when the server closed the connection, ValueError for an
    answer this client does not read (no ``Content-Length``).
    """
    reader, writer = conn
    data = body.encode()
    lines = [f"POST /hooks/bench HTTP/1.1\r\nhost: {netloc}\r\ncontent-length: {len(data)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise EOFError("the server closed the connection") from exc
    status_line, *fields = head[:-4].split(b"\r\n")
    length = None
    for field in fields:
        name, _, value = field.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length is None:
        raise ValueError("an answer without Content-Length")
    try:
        return int(status_line.split(b" ", 2)[1]), await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise EOFError("the server closed the connection") from exc


def _home(tmp, backend):
    from signoff.app import Signoff
    backend.write_config(tmp / "home", "http")
    rt = Signoff.init(tmp / "home")
    rt.host().put_grant(docs=["doc-bench"])  # the reference host grants doc-demo only
    rt.bind("doc-bench", "bench")
    return rt, rt.add_secret("bench")["secret"]


def run_http_bench(events=EVENTS, clients=CLIENTS, bad=None, paced=None, as_json=False,
                   database_url=None, queue_url=None):
    """Run the four passes; print a summary unless ``as_json``; return the figures.

    ``bad`` and ``paced`` default to a fortieth and a quarter of ``events``
    (500 and 5,000 for the full 20,000). ``database_url`` / ``queue_url`` put
    the served home on PostgreSQL and Redis or PostgreSQL, as ``python -m bench``
    does (a database and queue name of its own, dropped after the run).
    """
    bad = max(1, events // 40) if bad is None else bad
    paced = max(1, events // 4) if paced is None else paced
    say = (lambda msg: None) if as_json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    backend = BenchBackend(database_url, queue_url)
    try:
        with backend_env_set_aside(), tempfile.TemporaryDirectory(prefix="signoff-bench-http-") as tmp:
            rt, secret = _home(Path(tmp), backend)
            try:
                passes = _passes(rt, secret, events, clients, bad, paced, say)
                report = _report(rt, *passes[:4], events, clients)
            finally:
                rt.close()
    finally:
        backend.close()
    for figures in passes[4:]:
        figures.pop("accepted_ids")
    report["bare_half_rate"], report["durable_bare"] = passes[4:]
    report["ratio_to_durable_bare"] = round(report["signoff"]["per_s"] / passes[5]["per_s"], 3)
    report["backend"] = backend.label
    if not as_json:
        _print(report)
    return report


def _passes(rt, secret, events, clients, bad, paced, say):
    """The durable bare endpoint, the bare one, then ``signoff serve``: full rate, bad
    signatures, half rate; the bare endpoint paced as signoff was last."""
    good, sign = events_for(events, "evt"), signer(secret)
    durable_proc, durable_url = _start([sys.executable, "-m", "bench.webhooks",
                                        str(rt.home / "durable-bare.db")],
                                       env={"BENCH_WEBHOOK_SECRET": secret})
    try:
        say(f"durable bare endpoint: {events} signed requests from {clients} clients")
        durable = _with_cpu(durable_proc, lambda: asyncio.run(_load(durable_url, good, sign,
                                                                    clients)))
    finally:
        _stop(durable_proc)
    durable["stored"] = _rows(rt.home / "durable-bare.db")
    bare_proc, bare_url = _start([sys.executable, "-m", "bench.webhooks"])
    try:
        say(f"bare endpoint: {events} requests from {clients} clients")
        bare = _with_cpu(bare_proc, lambda: asyncio.run(_load(bare_url, good, sign, clients)))
        serve_proc, url = _start([sys.executable, "-m", "signoff", "--home", str(rt.home),
                                  "serve", "--port", "0"])
        try:
            say(f"signoff serve: {events} signed events from {clients} clients")
            ingest = _with_cpu(serve_proc, lambda: asyncio.run(_load(url, good, sign, clients)))
            say(f"signoff serve: {bad} badly signed requests")
            refused = asyncio.run(_load(url, events_for(bad, "bad"), signer(secret, bad=True),
                                        clients))
            rate = ingest["per_s"] * 0.5
            say(f"signoff serve: {paced} events paced at {rate:.0f}/s (half its rate)")
            half = asyncio.run(_load(url, events_for(paced, "paced"), sign, clients, rate=rate))
        finally:
            _stop(serve_proc)
        say(f"bare endpoint: {paced} requests paced at {rate:.0f}/s (the machine's own tail)")
        bare_half = asyncio.run(_load(bare_url, good[:paced], sign, clients, rate=rate))
    finally:
        _stop(bare_proc)
    return bare, ingest, refused, half, bare_half, durable


def _rows(path):
    """Deliveries the durable bare endpoint stored, read back once it stopped."""
    import sqlite3
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM delivery").fetchone()[0]
    finally:
        conn.close()


def _with_cpu(proc, load):
    """``load()``'s figures, with the CPU milliseconds per request of the server and of
    this load process, and how busy each was (CPU seconds per second; 1.0 is one core
    in full). They share the machine's cores: a pass whose load process is the busier
    one measured the load, not the server."""
    before, load_before = cpu_s(proc.pid), cpu_s()
    figures = load()
    after, load_after = cpu_s(proc.pid), cpu_s()
    load_s = load_after - load_before
    server_s = None if before is None or after is None else after - before
    figures["load_cpu_ms_per_request"] = round(load_s * 1000 / figures["requests"], 3)
    figures["load_busy"] = round(load_s / figures["seconds"], 2)
    figures["server_cpu_ms_per_request"] = (None if server_s is None else
                                            round(server_s * 1000 / figures["requests"], 3))
    figures["server_busy"] = None if server_s is None else round(server_s / figures["seconds"], 2)
    return figures


@reads
def _report(rt, bare, ingest, refused, half, events, clients):
    from peewee import fn

    from signoff.models import Delivery
    accepted = set(ingest.pop("accepted_ids")) | set(half.pop("accepted_ids"))
    refused.pop("accepted_ids")
    bare.pop("accepted_ids")
    stored = {e for (e,) in Delivery.select(Delivery.event_id).tuples()}
    # One group commit stamps its rows with one time: distinct stamps = commits.
    commits = Delivery.select(fn.COUNT(fn.DISTINCT(Delivery.accepted_at))).scalar() or 1
    ratio = ingest["per_s"] / bare["per_s"]
    return {
        "events": events, "clients": clients,
        "bare": bare, "signoff": ingest, "bad_signatures": refused, "half_rate": half,
        "accepted": len(accepted), "lost": len(accepted - stored),
        "events_per_commit": round(len(stored) / commits, 2),
        "bad_all_401": refused["statuses"] == {401: refused["requests"]},
        "ratio": round(ratio, 3),
        "targets": {
            "ratio": {"value": round(ratio, 3), "target": f">= {TARGET_RATIO}", "pass": ratio >= TARGET_RATIO},
            "p99_ms_at_half_rate": {"value": half["p99_ms"], "target": f"< {TARGET_P99_MS}",
                                    "pass": half["p99_ms"] is not None
                                    and half["p99_ms"] < TARGET_P99_MS},
        },
    }


def _ms(value):
    return "      - ms" if value is None else f"{value:>7.2f} ms"


def _print(r):
    for name in ("bare", "bare_half_rate", "durable_bare", "signoff", "bad_signatures", "half_rate"):
        x = r[name]
        print(f"{name:<15} {x['requests']:>6} req  {x['per_s']:>8.1f}/s  p50 {_ms(x['p50_ms'])}  "
              f"p99 {_ms(x['p99_ms'])}  {x['statuses']}")
    for name in ("bare", "durable_bare", "signoff"):
        x = r[name]
        print(f"{name:<15} CPU per request: server {x['server_cpu_ms_per_request']} ms "
              f"(busy {x['server_busy']}), load {x['load_cpu_ms_per_request']} ms "
              f"(busy {x['load_busy']})")
    print(f"signoff against the durable bare endpoint: {r['ratio_to_durable_bare']}")
    print(f"accepted {r['accepted']}, lost {r['lost']}, bad signatures all 401: {r['bad_all_401']}, "
          f"{r['events_per_commit']} events per commit")
    for key, t in r["targets"].items():
        print(f"{key:<22} {t['value']} (target {t['target']}): {'pass' if t['pass'] else 'FAIL'}")


if __name__ == "__main__":
    # ``python -m bench.webhooks [DATABASE]``: the bare endpoint, or with a database
    # path the durable one, its secret in ``BENCH_WEBHOOK_SECRET``.
    serve_bare(durable=(sys.argv[1], os.environ["BENCH_WEBHOOK_SECRET"]) if sys.argv[1:] else None)
