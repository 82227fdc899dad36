"""Store URLs: what `open_store(url)` and `open_store_async(url)` open (the edge of the library).

A URL may carry the store's own arguments as query parameters (`postgresql://...?schema=chat`,
`redis://...?prefix=chat&connect_timeout=2`); `store_url` splits them off. Parameters that
belong to the driver (libpq's `sslmode`, redis-py's `socket_keepalive`, ...) stay in the URL;
any other name is refused with the list of accepted ones.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from turnlog.errors import InvalidInput

__all__ = ["SCHEMES", "URL_PARAMETERS", "load_optional", "store_target", "store_url"]

SCHEMES = (
    "sqlite",
    "postgresql",
    "postgres",
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "memory",
)

_EXTRAS = {
    "turnlog.stores.postgres": "postgres",
    "turnlog.stores.redis": "redis",
}


def load_optional(module: str, name: str) -> Any:
    """`module.name`, or one ImportError naming what is missing and the extra to install."""
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        missing = _missing_module(exc)
        extra = _EXTRAS.get(module, "")
        raise ImportError(
            f"{name} needs {missing}, which is not installed: pip install 'turnlog[{extra}]'",
            name=missing,
        ) from exc


def _missing_module(exc: BaseException) -> str:
    """The package whose import failed, from the innermost ImportError that names one."""
    found = "an optional dependency"
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ImportError) and seen.name:
            found = seen.name.split(".")[0] if not seen.name.startswith("turnlog.") else found
        seen = seen.__cause__ or seen.__context__
    return found


# -- URL parameters ----------------------------------------------------------------------------


def _seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InvalidInput(f"URL parameter {name} is a number of seconds above 0, not {text!r}")
    return value


def _count(name: str, text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise InvalidInput(f"URL parameter {name} is a whole number of at least 1, not {text!r}")
    return int(text)


def _retries(name: str, text: str) -> int:
    if not text.isdigit():
        raise InvalidInput(f"URL parameter {name} is a whole number of at least 0, not {text!r}")
    return int(text)


def _text(name: str, text: str) -> str:
    return text


_Parser = Callable[[str, str], Any]
_REDIS_OWN: dict[str, _Parser] = {
    "prefix": _text,
    "connect_timeout": _seconds,
    "timeout": _seconds,
    "retries": _retries,
}

URL_PARAMETERS: Mapping[str, Mapping[str, _Parser]] = {
    "sqlite": {"busy_timeout": _seconds, "synchronous": _text},
    "memory": {},
    "postgresql": {
        "schema": _text,
        "partitions": _count,
        "connect_timeout": _seconds,
        "pool_min": _count,
        "pool_max": _count,
    },
    "redis": _REDIS_OWN,
    "redis+cluster": _REDIS_OWN,
}
"""turnlog's own query parameters per kind of URL: each becomes the store argument of that name."""

# Query parameters redis-py reads from a redis:// URL, passed on to it as they are.
_REDIS_DRIVER = frozenset(
    {
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_read_size",
        "retry_on_timeout",
        "max_connections",
        "health_check_interval",
        "client_name",
        "username",
        "password",
        "protocol",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_check_hostname",
        "ssl_ciphers",
        "ssl_min_version",
        "path",
    }
)

_KIND = {
    "sqlite": "sqlite",
    "memory": "memory",
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "redis": "redis",
    "rediss": "redis",
    "unix": "redis",
    "redis+cluster": "redis+cluster",
    "rediss+cluster": "redis+cluster",
}


def store_url(url: str) -> tuple[str, str, dict[str, Any]]:
    """Split turnlog's own query parameters off a store URL.

    Returns:
        The kind of store (`sqlite`, `memory`, `postgresql`, `redis` or `redis+cluster`, or
        `path` for a plain file path), the URL without turnlog's parameters (the driver's own
        stay), and the store arguments those parameters set.

    Raises:
        InvalidInput: an unknown scheme, an unknown parameter (the message lists the accepted
            ones), a parameter given twice or with a bad value.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("a store URL must be a non-empty string")
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            f"the store URL {url!r} is not valid UTF-8 text: check its encoding"
        ) from None
    scheme, sep, _ = url.partition("://")
    if not sep:
        return "path", url, {}
    kind = _KIND.get(scheme.lower())
    if kind is None:
        raise InvalidInput(
            f"unknown store URL scheme {scheme!r} in {_safe(url)!r}: use one of sqlite:///path, "
            "postgresql://..., redis://..., redis+cluster://host:port,..., memory://"
        )
    parts = urlsplit(url)
    own = URL_PARAMETERS[kind]
    options: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in own and name in options:
            raise InvalidInput(f"URL parameter {name} is given twice in {_safe(url)!r}")
        if name in own:
            if not value:
                raise InvalidInput(f"URL parameter {name} needs a value: {name}=...")
            options[name] = own[name](name, value)
        else:
            rest.append((name, value))
    if rest:
        _check_driver_parameters(kind, url, [n for n, _ in rest], own)
    if not options:
        return kind, url, options
    clean = urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote)))
    return kind, clean, options


def refuse_own_parameters(url: str, store: str) -> None:
    """For a store constructor given a URL: refuse turnlog's own query parameters (`prefix`,
    ...), which only `open_store` reads, and parameters the driver does not know, by name.

    Raises:
        InvalidInput: such a parameter; the message says to pass it as an argument.
    """
    _, _, own = store_url(url)
    if own:
        name = next(iter(own))
        raise InvalidInput(
            f"URL parameter {name} is read by open_store(url); pass {name}=... to {store}, or "
            "open the URL with open_store"
        )


def _check_driver_parameters(kind: str, url: str, names: list[str], own: Mapping[str, Any]) -> None:
    """Refuse parameters neither turnlog nor the driver reads, naming the accepted ones."""
    ours = ", ".join(own) or "none"
    if kind == "postgresql":
        bad = _libpq_refuses(url, names, own)
        driver = "; any other goes to libpq (sslmode, application_name, options, ...)"
    elif kind == "redis":
        bad = next((n for n in names if n not in _REDIS_DRIVER), None)
        driver = f"; redis-py reads {', '.join(sorted(_REDIS_DRIVER))}"
    else:
        bad, driver = names[0], ""
    if bad is not None:
        raise InvalidInput(
            f"unknown URL parameter {bad!r} in a {kind} URL: turnlog reads {ours}{driver}"
        )


def _libpq_refuses(url: str, names: list[str], own: Mapping[str, Any]) -> str | None:
    """The first of `names` libpq does not know (psycopg parses the URL), or None."""
    try:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None  # opening the store then names the extra to install
    parts = urlsplit(url)
    for name in names:
        query = urlencode([(name, "1")])
        try:
            conninfo_to_dict(urlunsplit(parts._replace(query=query)))
        except ProgrammingError:
            return name
    return None


def _safe(url: str) -> str:
    """`url` without a password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def store_target(url: str, options: Mapping[str, Any]) -> tuple[str, str | Path, dict[str, Any]]:
    """What `open_store(url, **options)` opens: (kind, the path or the URL left for the
    driver, the store's arguments from the URL and `options` together).

    Raises:
        InvalidInput: an unknown scheme or parameter, a malformed URL, an argument given both in
            the URL and in `options`, a sqlite URL without a file.
    """
    kind, clean, from_url = store_url(url)
    twice = sorted(set(from_url) & set(options))
    if twice:
        raise InvalidInput(f"{twice[0]} is given both in the URL and as an argument: pick one")
    arguments = {**from_url, **options}
    if kind == "path":
        return "sqlite", Path(url), arguments
    if kind == "sqlite":
        path = unquote(urlsplit(url).path)
        if path.startswith("/"):
            path = path[1:]  # sqlite:///rel.db -> rel.db ; sqlite:////abs.db -> /abs.db
        if not path:
            raise InvalidInput(f"{url!r} names no file: use sqlite:///path/to/file.db")
        return "sqlite", Path(path), arguments
    return kind, clean, arguments
