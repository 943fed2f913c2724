"""The home folder, ``signoff.toml``, and loading plug-ins by import string."""

import importlib
import inspect
import ipaddress
import json
import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

from .errors import ConfigError, NoHome

CONFIG_NAME = "signoff.toml"
STATE_DB = "signoff.db"
QUEUE_DB = "queue.db"

DEFAULT_TOML = """\
# signoff configuration. Every key is optional; these are the defaults.

[host]
factory = "signoff.hosts.reference:ReferenceHost"
max_record_bytes = 262144      # a larger record is refused: record_too_large
max_material_bytes = 262144    # the same for a document's material

[host.options]

[drafter]
factory = "signoff.drafters.template:template"

[drafter.options]

[retry]
read_attempts = 5
draft_attempts = 3
submit_attempts = 8
base_delay_s = 0.5
max_delay_s = 30.0

[worker]
lease_ttl_s = 30.0
# batch_size = 200             # 50 when [database] url names PostgreSQL
# watchdog_s = 120.0           # 4 leases, 60 at least: a loop silent this long exits 1

[retention]
finished_days = 30

[audit]
# home_key = "home_key.pem"    # the home's Ed25519 key (PEM PKCS#8, mode 600), relative to the home

"""


def default_batch_size(database_url):
    """Rows one claim takes at most when ``[worker] batch_size`` is not set.

    SQLite has one writer: each batch's transactions are turns of its lock, and
    fewer, larger turns ingest about a quarter faster (each turn is longer: an
    enqueue beside a draining worker waits longer at the tail). PostgreSQL's
    workers write side by side, and a larger batch costs each worker memory
    (psycopg holds a batch's statements and their parameters) and concurrent
    callers their share. docs/performance.md has the figures.
    """
    return 200 if database_url is None else 50


@dataclass(frozen=True)
class RetryPolicy:
    """Budgets and backoff for each step (docs/configuration.md)."""

    read_attempts: int = 5
    draft_attempts: int = 3
    submit_attempts: int = 8
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0

    def budget(self, step):
        """Attempts allowed for ``step`` (read, draft or submit)."""
        return {"read": self.read_attempts, "draft": self.draft_attempts,
                "submit": self.submit_attempts}[step]


@dataclass(frozen=True)
class Config:
    """Everything read from one home folder."""

    home: Path
    host_factory: str = "signoff.hosts.reference:ReferenceHost"
    host_options: dict = field(default_factory=dict)
    drafter_factory: str = "signoff.drafters.template:template"
    drafter_options: dict = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    lease_ttl_s: float = 30.0
    batch_size: int = default_batch_size(None)  # _build passes the database's
    watchdog_s: float | None = None  # None: the worker's default (signoff.watchdog)
    database_url: str | None = None
    queue_url: str | None = None
    retention_days: float = 30.0
    queue_name: str = "signoff"
    max_record_bytes: int = 262144
    max_material_bytes: int = 262144
    home_key_path: Path | None = None  # [audit] home_key; None: home_key.pem in the home

    @property
    def state_path(self):
        """The SQLite state database in the home."""
        return self.home / STATE_DB

    @property
    def queue_path(self):
        """The SQLite queue file in the home."""
        return self.home / QUEUE_DB


@dataclass(frozen=True)
class Range:
    """Where a number from ``signoff.toml`` may lie: finite, from ``low`` (or, with
    ``above``, above it) to ``high``."""

    low: float
    high: float
    above: bool = False

    def holds(self, value):
        """True when ``value`` lies in the range."""
        return (math.isfinite(value) and value <= self.high
                and (value > self.low if self.above else value >= self.low))

    def __str__(self):
        return (f"above {self.low} and at most {self.high}" if self.above
                else f"from {self.low} to {self.high}")


# Each range is also the command line's for the same setting (cli.Within).
ATTEMPTS = Range(1, 1000)
DELAY_S = Range(0, 86400)
LEASE_S = Range(0.1, 86400)  # [worker] lease_ttl_s and `worker --lease-ttl`
BATCH = Range(1, 1000)
WATCHDOG_S = Range(1, 86400)  # [worker] watchdog_s
DAYS = Range(0, 36500, above=True)
# `purge --older-than`: [retention] finished_days' days, and 0 too (a purge run by
# hand may take every finished task; a worker's hourly purge keeps at least some time).
PURGE_DAYS = Range(0, DAYS.high)
# `worker --workers`: threads of one process. Each holds a database connection (two
# with a PostgreSQL queue); past this many, a machine wants more processes instead.
WORKERS = Range(1, 256)
ANSWER_BYTES = Range(1, 2**30)  # [host] max_record_bytes / max_material_bytes
NUMBER = (int, float)

# Every table signoff.toml may hold. [serve] and [notify] are read, and their
# keys checked, where they are used; the keys of the others are these.
SECTIONS = ("host", "drafter", "retry", "worker", "retention", "database", "queue", "serve",
            "notify", "audit")
KEYS = {"host": ("factory", "options", "max_record_bytes", "max_material_bytes"),
        "drafter": ("factory", "options"),
        "retry": tuple(f.name for f in fields(RetryPolicy)),
        "worker": ("lease_ttl_s", "batch_size", "watchdog_s"),
        "retention": ("finished_days",),
        "database": ("url",),
        "queue": ("url", "name"),
        "audit": ("home_key",)}
MAX_NESTING = 100  # a value nested deeper cannot be read (Python's parser recurses)

# The home holds record snapshots, results and approvers' names: only its owner
# may read it. SQLite gives a database's -wal and -shm files the database
# file's mode, so tightening the files once keeps them private from then on.
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
PRIVATE_SUFFIXES = (".db", ".db-wal", ".db-shm", ".db-journal")


def resolve_home(home=None):
    """The home folder: the argument, else ``$SIGNOFF_HOME``, else ``./.signoff``.

    An empty string is refused: it would otherwise silently mean the default.
    """
    if isinstance(home, str) and not home.strip():
        raise ValueError("the home must name a folder; an empty path is not the default home")
    return Path(home or os.environ.get("SIGNOFF_HOME") or ".signoff").absolute()


def write_default(home):
    """Create ``home`` (mode 700) and its ``signoff.toml`` (600); never overwrite."""
    home.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    path = home / CONFIG_NAME
    if not path.exists():
        with private_file(path, "w") as out:
            out.write(DEFAULT_TOML)


def private_file(path, mode="w"):
    """Open ``path`` for writing, created with mode 600 (text for "w", bytes for "wb")."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    os.fchmod(fd, os.fstat(fd).st_mode & PRIVATE_FILE)  # an existing file is tightened too
    return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")


def make_private(home):
    """Tighten ``home`` to 700 and signoff's files in it to 600; never loosens a mode.

    Only the files signoff makes (the config and the databases with their
    journals) are touched, so a home pointed at a shared folder keeps the rest.
    """
    home = Path(home)
    os.chmod(home, home.stat().st_mode & PRIVATE_DIR)
    for path in home.iterdir():
        if path.name == CONFIG_NAME or path.name.endswith(PRIVATE_SUFFIXES):
            if path.is_file() and not path.is_symlink():
                os.chmod(path, path.stat().st_mode & PRIVATE_FILE)


def load_config(home):
    """Read ``signoff.toml`` from ``home``; one-line errors for every mistake."""
    home = Path(home)
    path = home / CONFIG_NAME
    if not path.exists():
        raise NoHome("no_home", f"no signoff home at {home}: run `signoff init` first")
    try:
        text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("bad_config", f"{path}: not valid TOML: {_toml_problem(exc)}") from None
    except RecursionError:
        raise ConfigError("bad_config", f"{path}: {_nested_at(text)}a value is nested deeper "
                          f"than {MAX_NESTING} levels") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("bad_config", f"{path}: not UTF-8 text (byte {exc.start + 1})") from None
    except OSError as exc:
        why = "it is a folder" if path.is_dir() else (exc.strerror or "it cannot be read").lower()
        raise ConfigError("bad_config", f"{path}: cannot be read: {why}") from None
    return _build(home, raw, path)


def _toml_problem(exc):
    # tomllib says what it expected and where, "... (at line L, column C)":
    # lead with the place, as people look for it first.
    text = str(exc)
    what, sep, where = text.rpartition(" (at ")
    if not sep:
        return text
    return f"{where.rstrip(')')}: {what[:1].lower()}{what[1:]}"


def _nested_at(text):
    """``"line N: "`` where brackets first nest past ``MAX_NESTING`` (empty if nowhere)."""
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        for ch in line:
            depth += (ch in "[{") - (ch in "]}")
            if depth > MAX_NESTING:
                return f"line {number}: "
    return ""


def _check_names(raw, path):
    """Refuse a section or key signoff does not know: a typo must not pass silently."""
    for name, table in raw.items():
        if name not in SECTIONS:
            what = f"section [{_shown(name)}]" if isinstance(table, dict) else f"key {_shown(name)}"
            raise ConfigError("bad_config", f"{path}: unknown {what} (known sections: "
                              f"{', '.join(SECTIONS)})")
        known = KEYS.get(name)
        unknown = sorted(set(table) - set(known)) if known and isinstance(table, dict) else []
        if unknown:
            raise ConfigError("bad_config", f"{path}: unknown key {name}.{_shown(unknown[0])} "
                              f"(known: {', '.join(known)})")


def _shown(name):
    """A name from the file, on one line and short."""
    return name if name.isprintable() and len(name) <= 60 else json.dumps(name[:60])


def _table(raw, name, path):
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError("bad_config", f"{path}: [{name}] must be a table")
    return value


def _typed(table, key, kind, default, path, section):
    value = table.get(key, default)
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if not ok and value is not None:
        wanted = {str: "a string", int: "an integer"}.get(kind, "a number")
        raise ConfigError("bad_config", f"{path}: {section}.{key} must be {wanted}, "
                          f"got {_toml_kind(value)}")
    return value


def number_in(table, key, kind, default, allowed, path, section):
    """A number of ``kind`` from ``table`` within the ``Range`` ``allowed``; ``bad_config``
    naming ``section.key`` otherwise."""
    value = _typed(table, key, kind, default, path, section)
    if not allowed.holds(value):
        shown = value if not isinstance(value, int) or abs(value) < 10**20 else "a larger number"
        raise ConfigError("bad_config", f"{path}: {section}.{key} must be {allowed}, got {shown}")
    return value


def _toml_kind(value):
    """What a TOML value is, in TOML's words."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a table" if isinstance(value, dict) else "an array or a date"


def _build(home, raw, path):
    _check_names(raw, path)
    host, drafter = _table(raw, "host", path), _table(raw, "drafter", path)
    retry_raw, worker = _table(raw, "retry", path), _table(raw, "worker", path)
    retry = {}
    for f in fields(RetryPolicy):
        kind, allowed = (int, ATTEMPTS) if isinstance(f.default, int) else (NUMBER, DELAY_S)
        retry[f.name] = number_in(retry_raw, f.name, kind, f.default, allowed, path, "retry")
    options = {}
    for section, table in (("host", host), ("drafter", drafter)):
        opts = table.get("options", {})
        if not isinstance(opts, dict):
            raise ConfigError("bad_config", f"{path}: [{section}.options] must be a table")
        options[section] = opts
    backends = _backends(raw, path)
    return Config(
        home=home,
        host_factory=_typed(host, "factory", str, Config.host_factory, path, "host"),
        host_options=options["host"],
        **{key: number_in(host, key, int, getattr(Config, key), ANSWER_BYTES, path, "host")
           for key in ("max_record_bytes", "max_material_bytes")},
        drafter_factory=_typed(drafter, "factory", str, Config.drafter_factory, path, "drafter"),
        drafter_options=options["drafter"],
        retry=RetryPolicy(**retry),
        lease_ttl_s=float(number_in(worker, "lease_ttl_s", NUMBER, 30.0, LEASE_S, path, "worker")),
        batch_size=number_in(worker, "batch_size", int,
                             default_batch_size(backends["database_url"]), BATCH, path, "worker"),
        watchdog_s=(float(number_in(worker, "watchdog_s", NUMBER, None, WATCHDOG_S, path, "worker"))
                    if "watchdog_s" in worker else None),
        retention_days=float(number_in(_table(raw, "retention", path), "finished_days", NUMBER,
                                       30, DAYS, path, "retention")),
        home_key_path=_home_key_path(home, _table(raw, "audit", path), path),
        **backends,
    )


def _home_key_path(home, audit, path):
    """``[audit] home_key``: the home key's file (relative to the home), or ``None``."""
    value = _typed(audit, "home_key", str, None, path, "audit")
    if value is not None and not value.strip():
        raise ConfigError("bad_config", f"{path}: audit.home_key must name a file")
    return None if value is None else home / Path(value).expanduser()


# The servers a [database] or [queue] url may name, by their schemes.
SCHEMES = {"postgresql": ("postgresql://", "postgres://"),
           "redis": ("redis://", "rediss://", "unix://")}
# The extra a server needs: (extra, the module it installs).
EXTRAS = {"postgresql": ("postgres", "psycopg"), "redis": ("redis", "redis")}


def kind_of(url):
    """``"sqlite"`` for no url (the files in the home), else ``"postgresql"`` or ``"redis"``.

    Any other scheme is a ``bad_config``.
    """
    if url is None:
        return "sqlite"
    for kind, schemes in SCHEMES.items():
        if url.startswith(schemes):
            return kind
    raise ConfigError("bad_config", f"unsupported url {url!r} (postgresql://, redis:// or "
                      "rediss://)")


# The environment overrides signoff.toml for these (an empty value counts as unset).
BACKEND_ENV = {"database_url": "SIGNOFF_DATABASE_URL", "queue_url": "SIGNOFF_QUEUE_URL",
               "queue_name": "SIGNOFF_QUEUE_NAME"}


def _backends(raw, path):
    """``[database] url``, ``[queue] url`` and ``[queue] name``, environment first."""
    database, queue = _table(raw, "database", path), _table(raw, "queue", path)
    values = {"database_url": _typed(database, "url", str, None, path, "database"),
              "queue_url": _typed(queue, "url", str, None, path, "queue"),
              "queue_name": _typed(queue, "name", str, "signoff", path, "queue")}
    for key, variable in BACKEND_ENV.items():
        if os.environ.get(variable):
            values[key] = os.environ[variable]
    if not values["queue_name"] or not values["queue_name"].isprintable():
        raise ConfigError("bad_config", f"{path}: queue.name must be a printable, non-empty name")
    return values


# Factories named in the signoff.toml of earlier versions, by what they name now:
# those homes keep working with their config unchanged.
RENAMED_FACTORIES = {"signoff.drafting:template": "signoff.drafters.template:template"}


def load_plugin(spec, what):
    """Import ``"module:callable"``; a one-line ``plugin_import`` error if that fails.

    A name in ``RENAMED_FACTORIES`` is imported under its current name.
    """
    module_name, sep, attr = RENAMED_FACTORIES.get(spec, spec).partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("plugin_import", f"{what} factory {spec!r} must look like 'module:callable'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of a plug-in is the user's to fix
        raise ConfigError("plugin_import", _import_problem(what, module_name, exc)) from None
    target = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError("plugin_import", f"{what} factory {spec!r}: module {module_name} "
                              f"has no {attr!r}; check the name after the colon")
    if not callable(target):
        raise ConfigError("plugin_import", f"{what} factory {spec!r} is not callable; "
                          "name a class or function")
    return target


def _import_problem(what, module_name, exc):
    """Why a plug-in module did not import, in words, with what to do."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and (
            module_name == exc.name or module_name.startswith(exc.name + ".")):
        return (f"cannot import {what} module {module_name!r}: no such module on the Python "
                "path; install its package, or add its folder to PYTHONPATH")
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return (f"{what} module {module_name!r} needs module {exc.name!r}, which is not "
                "installed")
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
    return (f"{what} module {module_name!r} failed while importing: {type(exc).__name__}"
            f"{where}; run `python -c \"import {module_name}\"` to see why")


def call_factory(factory, spec, section, home, options):
    """Call a plug-in factory with ``home`` and its ``[section.options]``.

    A factory that does not take an option is a ``bad_config`` naming the key
    and the options it takes, never Python's own ``TypeError`` text.
    """
    unknown = _unaccepted(factory, ["home", *options])
    if unknown:
        accepted = _accepted(factory)
        raise ConfigError("bad_config", f"[{section}.options] {unknown[0]!r} is not an option "
                          f"of {spec} (it takes: {', '.join(accepted) or 'none'})")
    try:
        return factory(home=home, **options)
    except TypeError as exc:
        raise ConfigError("bad_config", f"{spec} refused the [{section}.options] given "
                          f"({', '.join(options) or 'none'}); check their names and values"
                          ) from exc


def _parameters(factory):
    try:
        return inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: let the call decide
        return None


def _unaccepted(factory, names):
    params = _parameters(factory)
    if params is None or any(p.kind is p.VAR_KEYWORD for p in params):
        return []
    known = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [n for n in names if n not in known and n != "home"]


def _accepted(factory):
    return [p.name for p in _parameters(factory) or ()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "home"]


# -- the [serve] table (read here so the core never imports the web stack) ------
#
#     [serve]
#     secure_cookies = false        # true behind an HTTPS reverse proxy
#     trusted_proxies = "127.0.0.1" # whose X-Forwarded-* headers uvicorn believes (default: none)
#     login_failures = 5            # failed logins per client address and name ...
#     login_client_failures = 20    # ... or failed logins and tokens per client address ...
#     login_window_s = 60.0         # ... within this many seconds, then 429 until it passes
#     public_url = "https://signoff.example"  # where an MCP Events server reaches serve

SERVE_DEFAULTS = {"secure_cookies": False, "trusted_proxies": "", "login_failures": 5,
            "login_client_failures": 20, "login_window_s": 60.0, "public_url": None}


def read_table(home, name):
    """The ``[name]`` table of the home's ``signoff.toml`` (empty when absent)."""
    path = home / CONFIG_NAME
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError("bad_config", f"{path}: {exc}") from None
    table = raw.get(name, {})
    if not isinstance(table, dict):
        raise ConfigError("bad_config", f"{path}: [{name}] must be a table")
    return table


def serve_settings(home):
    """``[serve]`` with defaults filled in and types checked."""
    table = read_table(home, "serve")
    unknown = set(table) - set(SERVE_DEFAULTS)
    if unknown:
        raise ConfigError("bad_config", f"unknown key serve.{sorted(unknown)[0]}")
    out = dict(SERVE_DEFAULTS, **table)
    if not isinstance(out["secure_cookies"], bool) or not isinstance(out["trusted_proxies"], str):
        raise ConfigError("bad_config", "serve.secure_cookies must be a boolean and "
                          "serve.trusted_proxies a string")
    _check_proxies(out["trusted_proxies"])
    for name in ("login_failures", "login_client_failures"):
        if type(out[name]) is not int or not 1 <= out[name] <= 1000:
            raise ConfigError("bad_config", f"serve.{name} must be an integer from 1 to 1000")
    window = out["login_window_s"]
    if type(window) not in (int, float) or not 0 < window <= 86400:
        raise ConfigError("bad_config", "serve.login_window_s must be a number of seconds "
                          "above 0, at most 86400")
    public = out["public_url"]
    if public is not None and not (isinstance(public, str) and _is_base_url(public)):
        raise ConfigError("bad_config", "serve.public_url must be an http(s) URL without a "
                          "query, such as \"https://signoff.example\"")
    return out


def _check_proxies(text):
    """Refuse a ``trusted_proxies`` entry that is not an IP address or network (or ``*``):
    uvicorn would take it as a literal name no client ever has, and trust nobody silently."""
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            if item != "*":
                raise ConfigError("bad_config", f"serve.trusted_proxies: {item!r} is not an IP "
                                  "address or network (comma-separated, e.g. "
                                  "\"127.0.0.1, 10.0.0.0/8\")") from None


def _is_base_url(text):
    parts = urlsplit(text)
    return parts.scheme in ("http", "https") and bool(parts.netloc) and not (
        parts.query or parts.fragment)
