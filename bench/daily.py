"""What people open every day, on a home with a big history beside a small one.

    python bench/daily.py [--rows 1000000] [--small 300] [--repeat 5] [--json]
        [--database-url postgresql://…]

Builds two homes (``--rows`` finished tasks with the rows a real one leaves,
and ``--small`` of them), starts ``signoff serve`` on each, and times, median
of ``--repeat``: ``GET /metrics``, ``GET /api/v1/tasks``, the review index
(``GET /``), a task's page and its ``GET /api/v1/tasks/KEY``, ``signoff stats
--json``, ``signoff tasks list`` and ``signoff tasks show KEY`` (whole commands,
start-up included). Prints each figure for both homes and their
ratio (target: each <= 2.0).
"""

import argparse
import http.cookiejar
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.backends import BenchBackend, vacuum  # noqa: E402
from bench.pipeline import _signoff_home  # noqa: E402
from signoff import storage  # noqa: E402
from signoff.models import Task  # noqa: E402
from signoff.serve.pages import LOGIN_COOKIE  # noqa: E402

TARGET = 2.0


def build(folder, rows, backend):
    """A home with ``rows`` finished tasks; returns a reviewer's token and the key of
    one of those tasks (whose page is opened)."""
    rt = _signoff_home(folder, 300, rows, backend, lambda line: print(line, file=sys.stderr))
    url = rt.config.database_url
    with storage.bind(rt.database):
        key = Task.select(Task.key).order_by(Task.key).first().key
    rt.close()
    if url:
        vacuum(url)
    out = _cli(folder, "reviewer", "add", "ada", "--json")
    return json.loads(out)["token"], key


def _cli(home, *args):
    done = subprocess.run([sys.executable, "-m", "signoff", "--home", str(home), *args],
                          capture_output=True, text=True, check=True, env=_env())
    return done.stdout


def _env():
    root = str(Path(__file__).resolve().parent.parent)
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))


class Serve:
    """``signoff serve`` on a free port, logged in as the home's reviewer."""

    def __init__(self, home, token):
        self.proc = subprocess.Popen([sys.executable, "-m", "signoff", "--home", str(home),
                                      "serve", "--port", "0"], stdout=subprocess.PIPE,
                                     text=True, env=_env())
        self.url = json.loads(self.proc.stdout.readline())["listening"]
        self.token = token
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.opener.open(self.url + "/login").read()  # sets the login form's CSRF cookie
        csrf = next(c.value for c in self.jar if c.name == LOGIN_COOKIE)
        body = urllib.parse.urlencode({"name": "ada", "token": token, "csrf_token": csrf}).encode()
        self.opener.open(self.url + "/login", data=body).read()

    def get(self, path, bearer=False):
        request = urllib.request.Request(self.url + path)
        if bearer:
            request.add_header("Authorization", f"Bearer {self.token}")
        with self.opener.open(request) as answer:
            return answer.read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def _median_ms(call, repeat):
    call()  # warm: the first read of a table pays the page cache
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(home, token, key, repeat):
    """Median milliseconds of each daily read on ``home``; ``key``: a task whose page,
    API answer and ``tasks show`` are read."""
    serve = Serve(home, token)
    try:
        return {
            "GET /metrics": _median_ms(lambda: serve.get("/metrics"), repeat),
            "GET /api/v1/tasks": _median_ms(lambda: serve.get("/api/v1/tasks", bearer=True), repeat),
            "review index": _median_ms(lambda: serve.get("/"), repeat),
            "task page": _median_ms(lambda: serve.get(f"/tasks/{key}"), repeat),
            "GET /api/v1/tasks/KEY": _median_ms(
                lambda: serve.get(f"/api/v1/tasks/{key}", bearer=True), repeat),
            "stats --json": _median_ms(lambda: _cli(home, "stats", "--json"), repeat),
            "tasks list": _median_ms(lambda: _cli(home, "tasks", "list"), repeat),
            "tasks show KEY": _median_ms(lambda: _cli(home, "tasks", "show", key), repeat),
        }
    finally:
        serve.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    backend = BenchBackend(database_url=args.database_url,
                           queue_url=args.database_url)  # the queue is not timed here
    with tempfile.TemporaryDirectory(prefix="signoff-daily-") as tmp:
        homes = {}
        for name, rows in (("small", args.small), ("big", args.rows)):
            folder = Path(tmp) / name
            folder.mkdir()
            started = time.perf_counter()
            homes[name] = (folder, *build(folder, rows, backend))
            print(f"{name}: {rows:,} finished tasks in {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
        try:
            figures = {name: measure(folder, token, key, args.repeat)
                       for name, (folder, token, key) in homes.items()}
        finally:
            backend.close()
    report = {what: {"small_ms": round(figures["small"][what], 1),
                     "big_ms": round(figures["big"][what], 1),
                     "ratio": round(figures["big"][what] / figures["small"][what], 2)}
              for what in figures["small"]}
    if args.json:
        print(json.dumps({"rows": args.rows, "small": args.small, "figures": report}, indent=2))
    else:
        print(f"{'read':<24}{args.small:>10,} tasks{args.rows:>12,} tasks{'ratio':>8}")
        for what, f in report.items():
            mark = "" if f["ratio"] <= TARGET else "  (target <= 2.0)"
            print(f"{what:<24}{f['small_ms']:>13.1f} ms{f['big_ms']:>13.1f} ms{f['ratio']:>7.2f}x{mark}")
    return 0 if all(f["ratio"] <= TARGET for f in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
