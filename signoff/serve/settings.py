"""The ``[serve]`` table of ``signoff.toml`` (the core config ignores it).

    [serve]
    secure_cookies = false        # true behind an HTTPS reverse proxy
    trusted_proxies = "127.0.0.1" # whose X-Forwarded-* headers uvicorn believes
"""

import tomllib

from ..config import CONFIG_NAME
from ..errors import ConfigError

DEFAULTS = {"secure_cookies": False, "trusted_proxies": "127.0.0.1"}


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
    unknown = set(table) - set(DEFAULTS)
    if unknown:
        raise ConfigError("bad_config", f"unknown key serve.{sorted(unknown)[0]}")
    out = dict(DEFAULTS, **table)
    if not isinstance(out["secure_cookies"], bool) or not isinstance(out["trusted_proxies"], str):
        raise ConfigError("bad_config", "serve.secure_cookies must be a boolean and "
                          "serve.trusted_proxies a string")
    return out
