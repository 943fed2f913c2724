"""The ``[serve]`` table of ``signoff.toml`` (the core config ignores it).

    [serve]
    secure_cookies = false        # true behind an HTTPS reverse proxy
    trusted_proxies = "127.0.0.1" # whose X-Forwarded-* headers uvicorn believes
    login_failures = 5            # failed logins per client address or reviewer ...
    login_window_s = 60.0         # ... within this many seconds, then 429 until it passes
    public_url = "https://signoff.example"  # where an MCP Events server reaches serve
"""

import tomllib
from urllib.parse import urlsplit

from ..config import CONFIG_NAME
from ..errors import ConfigError

DEFAULTS = {"secure_cookies": False, "trusted_proxies": "127.0.0.1", "login_failures": 5,
            "login_window_s": 60.0, "public_url": None}


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
    failures, window = out["login_failures"], out["login_window_s"]
    if type(failures) is not int or not 1 <= failures <= 1000:
        raise ConfigError("bad_config", "serve.login_failures must be an integer from 1 to 1000")
    if type(window) not in (int, float) or not 0 < window <= 86400:
        raise ConfigError("bad_config", "serve.login_window_s must be a number of seconds "
                          "above 0, at most 86400")
    public = out["public_url"]
    if public is not None and not (isinstance(public, str) and _is_base_url(public)):
        raise ConfigError("bad_config", "serve.public_url must be an http(s) URL without a "
                          "query, such as \"https://signoff.example\"")
    return out


def _is_base_url(text):
    parts = urlsplit(text)
    return parts.scheme in ("http", "https") and bool(parts.netloc) and not (
        parts.query or parts.fragment)
