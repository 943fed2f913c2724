"""The home folder, ``signoff.toml``, and loading plug-ins by import string."""

import importlib
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from .errors import ConfigError, NoHome

CONFIG_NAME = "signoff.toml"
STATE_DB = "signoff.db"
QUEUE_DB = "queue.db"

DEFAULT_TOML = """\
# signoff configuration. Every key is optional; these are the defaults.

[host]
factory = "signoff.hosts.reference:ReferenceHost"

[host.options]

[drafter]
factory = "signoff.drafting:template"

[drafter.options]

[retry]
read_attempts = 5
draft_attempts = 3
submit_attempts = 8
base_delay_s = 0.5
max_delay_s = 30.0

[worker]
lease_ttl_s = 30.0
batch_size = 50

"""


@dataclass(frozen=True)
class RetryPolicy:
    """Budgets and backoff for each step (SPEC section 7)."""

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
    drafter_factory: str = "signoff.drafting:template"
    drafter_options: dict = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    lease_ttl_s: float = 30.0
    batch_size: int = 50
    database_url: str | None = None
    queue_url: str | None = None
    queue_name: str = "signoff"

    @property
    def state_path(self):
        """The SQLite state database in the home."""
        return self.home / STATE_DB

    @property
    def queue_path(self):
        """The SQLite queue file in the home."""
        return self.home / QUEUE_DB


def resolve_home(home=None):
    """The home folder: the argument, else ``$SIGNOFF_HOME``, else ``./.signoff``."""
    return Path(home or os.environ.get("SIGNOFF_HOME") or ".signoff").absolute()


def write_default(home):
    """Create ``home`` and its ``signoff.toml`` unless they exist; never overwrite."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / CONFIG_NAME
    if not path.exists():
        path.write_text(DEFAULT_TOML, encoding="utf-8")


def load_config(home):
    """Read ``signoff.toml`` from ``home``; one-line errors for every mistake."""
    home = Path(home)
    path = home / CONFIG_NAME
    if not path.exists():
        raise NoHome("no_home", f"no signoff home at {home}: run `signoff init` first")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
        raise ConfigError("bad_config", f"{path}: {exc}") from None
    return _build(home, raw, path)


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
        raise ConfigError("bad_config", f"{path}: {section}.{key} must be {wanted}")
    return value


def _build(home, raw, path):
    host = _table(raw, "host", path)
    drafter = _table(raw, "drafter", path)
    retry_raw = _table(raw, "retry", path)
    worker = _table(raw, "worker", path)
    number = (int, float)
    known = {f.name: f.default for f in fields(RetryPolicy)}
    unknown = set(retry_raw) - set(known)
    if unknown:
        raise ConfigError("bad_config", f"{path}: unknown key retry.{sorted(unknown)[0]}")
    retry = {}
    for key, default in known.items():
        kind = int if isinstance(default, int) else number
        value = _typed(retry_raw, key, kind, default, path, "retry")
        if value < (1 if kind is int else 0):
            raise ConfigError("bad_config", f"{path}: retry.{key} must be positive")
        retry[key] = value
    options = {}
    for section, table in (("host", host), ("drafter", drafter)):
        opts = table.get("options", {})
        if not isinstance(opts, dict):
            raise ConfigError("bad_config", f"{path}: [{section}.options] must be a table")
        options[section] = opts
    lease = _typed(worker, "lease_ttl_s", number, 30.0, path, "worker")
    batch = _typed(worker, "batch_size", int, 50, path, "worker")
    if lease <= 0 or batch < 1:
        raise ConfigError("bad_config", f"{path}: worker.lease_ttl_s and worker.batch_size must be positive")
    return Config(
        home=home,
        host_factory=_typed(host, "factory", str, Config.host_factory, path, "host"),
        host_options=options["host"],
        drafter_factory=_typed(drafter, "factory", str, Config.drafter_factory, path, "drafter"),
        drafter_options=options["drafter"],
        retry=RetryPolicy(**retry),
        lease_ttl_s=float(lease),
        batch_size=batch,
        **_backends(raw, path),
    )


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


def load_plugin(spec, what):
    """Import ``"module:callable"``; a one-line ``plugin_import`` error if that fails."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("plugin_import", f"{what} factory {spec!r} must look like 'module:callable'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of a plug-in is the user's to fix
        raise ConfigError("plugin_import", f"cannot import {what} module {module_name!r}: {type(exc).__name__}: {exc}") from None
    target = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError("plugin_import", f"{what} factory {spec!r}: {module_name} has no attribute {attr!r}")
    if not callable(target):
        raise ConfigError("plugin_import", f"{what} factory {spec!r} is not callable")
    return target
