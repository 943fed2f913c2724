"""Backend URLs, classified in one place."""

from ..errors import ConfigError
from .drivers import load

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
            load(module)
        except ImportError as exc:
            missing.setdefault(extra, f"the [{what}] url needs {module} ({exc})")
    if missing:
        raise ConfigError("missing_extra", f"pip install 'signoff[{','.join(sorted(missing))}]': "
                          + "; ".join(missing.values()))
