"""Backend URLs as the drivers take them, and the extras they need (their kinds are
``config.kind_of``'s)."""

import importlib

from ..config import EXTRAS, kind_of
from ..errors import ConfigError


def postgres_dsn(url):
    """``url`` in the ``postgresql://`` spelling libpq and psycopg expect."""
    if url.startswith("postgres://"):
        return "postgresql://" + url[len("postgres://"):]
    return url


def require_extras(config):
    """Refuse (``missing_extra``) the server URLs whose extra does not import, naming them all.

    Checked before anything connects, so every command says the same thing.
    """
    missing = {}
    for what, url in (("database", config.database_url), ("queue", config.queue_url)):
        kind = kind_of(url)
        if kind not in EXTRAS:
            continue
        extra, module = EXTRAS[kind]
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing.setdefault(extra, f"the [{what}] url needs {module} ({exc})")
    if missing:
        raise ConfigError("missing_extra", f"pip install 'signoff[{','.join(sorted(missing))}]': "
                          + "; ".join(missing.values()))
