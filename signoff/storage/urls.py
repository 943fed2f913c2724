"""Backend URLs, classified in one place."""

from ..errors import ConfigError

SCHEMES = {"postgresql": ("postgresql://", "postgres://"),
           "redis": ("redis://", "rediss://", "unix://")}


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
