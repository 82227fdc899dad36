"""open_store: one URL for every store."""

import sys

import pytest

from turnlog import InvalidInput, MemoryStore, SessionService, SqliteStore, open_store


def test_sqlite_urls_relative_absolute_and_plain(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///rel.db") as store:
        assert isinstance(store, SqliteStore) and store.path.name == "rel.db"
        SessionService(store).create("s")
    assert (tmp_path / "rel.db").exists()
    absolute = tmp_path / "sub" / "abs.db"
    absolute.parent.mkdir()
    with open_store(f"sqlite:///{absolute}") as store:
        assert store.path == absolute
    with open_store(str(tmp_path / "plain.db")) as store:
        assert isinstance(store, SqliteStore)


def test_memory_url():
    store = open_store("memory://")
    assert isinstance(store, MemoryStore)


@pytest.mark.parametrize("url", ["ftp://x", "sqlite://", "", "mysql://root@localhost/test"])
def test_unknown_or_malformed_urls_are_invalid(url):
    with pytest.raises(InvalidInput):
        open_store(url)


def test_a_missing_extra_names_the_pip_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "turnlog.stores.postgres", None)
    with pytest.raises(ImportError, match=r"pip install 'turnlog\[postgres\]'"):
        open_store("postgresql://postgres@127.0.0.1/test")
    monkeypatch.setitem(sys.modules, "turnlog.stores.redis", None)
    with pytest.raises(ImportError, match=r"pip install 'turnlog\[redis\]'"):
        open_store("redis://127.0.0.1:6379/0")


def test_server_stores_load_lazily_and_name_their_extra(monkeypatch):
    import subprocess

    code = (
        "import sys, turnlog\n"
        "assert 'psycopg' not in sys.modules and 'redis' not in sys.modules\n"
        "from turnlog import PostgresStore, RedisClusterStore, RedisStore\n"
        "print(PostgresStore.__name__, RedisStore.__name__, RedisClusterStore.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["PostgresStore", "RedisStore", "RedisClusterStore"]
    monkeypatch.setitem(sys.modules, "turnlog.stores.redis", None)
    import turnlog

    with pytest.raises(ImportError, match=r"turnlog\[redis\]"):
        turnlog.RedisStore  # noqa: B018


def test_open_store_reaches_the_real_servers(postgres_dsn, redis_url):
    import uuid

    import psycopg

    from turnlog import Message, SessionService

    schema = f"open_store_{uuid.uuid4().hex[:8]}"
    prefix = f"open-store-{uuid.uuid4().hex[:8]}"
    try:
        for url, options in ((postgres_dsn, {"schema": schema}), (redis_url, {"prefix": prefix})):
            with SessionService(open_store(url, **options)) as service:
                service.create("s")
                service.append_message("s", Message.user("hello"))
                assert service.version("s") == 1
                assert type(service.store).__name__ in ("PostgresStore", "RedisStore")
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        import redis

        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
