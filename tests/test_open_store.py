"""open_store: one URL for every store."""

import asyncio
import re
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


async def append_async(url, options):
    from turnlog import AsyncSessionService, Message, open_store_async

    store = await open_store_async(url, **options)
    assert type(store).__name__ in ("AsyncPostgresStore", "AsyncRedisStore")
    async with AsyncSessionService(store) as service:
        assert await service.version("s") == 1
        await service.append_message("s", Message.assistant("from asyncio"))


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
            # the async twin opens the same data, and the blocking store sees what it wrote
            asyncio.run(append_async(url, options))
            with SessionService(open_store(url, **options)) as service:
                assert [m.text for m in service.view_messages("s")] == ["hello", "from asyncio"]
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        import redis

        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()


# -- URL parameters ----------------------------------------------------------------------------


def test_url_parameters_become_store_arguments(tmp_path):
    from turnlog.stores.url import store_url

    kind, clean, options = store_url(
        "postgresql://app:pw@db/chat?sslmode=require&schema=support&options=-c%20work_mem%3D64MB"
        "&connect_timeout=2.5&partitions=8"
    )
    assert kind == "postgresql"
    assert options == {"schema": "support", "connect_timeout": 2.5, "partitions": 8}
    # libpq's own stay in the URL, still percent-encoded (libpq reads no "+" as a space)
    expected = "postgresql://app:pw@db/chat?sslmode=require&options=-c%20work_mem%3D64MB"
    assert clean == expected
    kind, clean, options = store_url("rediss://cache:6380/2?prefix=a%3Ab&socket_keepalive=true")
    assert (kind, options) == ("redis", {"prefix": "a:b"})
    assert clean == "rediss://cache:6380/2?socket_keepalive=true"
    with open_store(f"sqlite:///{tmp_path}/p.db?busy_timeout=0.5&synchronous=FULL") as store:
        assert store.path == tmp_path / "p.db"
        assert store._busy_timeout == 0.5 and store._synchronous == "FULL"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgresql://h/db?prefix=x", "unknown URL parameter 'prefix'"),
        ("redis://h?schema=x", "unknown URL parameter 'schema'"),
        ("redis://h?decode_responses=true", "unknown URL parameter 'decode_responses'"),
        ("memory://?x=1", "unknown URL parameter 'x'"),
        ("postgresql://h/db?pool_max=0", "pool_max is a whole number"),
        ("redis://h?retries=-1", "retries is a whole number"),
        ("redis://h?prefix=a&prefix=b", "prefix is given twice"),
        ("postgresql://u:secret@h/db?schema=a&schema=b", "postgresql://u:***@h/db"),
    ],
)
def test_bad_url_parameters_are_invalid_input(url, said):
    with pytest.raises(InvalidInput, match=re.escape(said)) as raised:
        open_store(url)
    assert "secret" not in str(raised.value)


def test_a_parameter_in_the_url_and_as_an_argument_is_refused():
    with pytest.raises(InvalidInput, match="schema is given both in the URL and as an argument"):
        open_store("postgresql://h/db?schema=a", schema="b")


def test_the_store_constructors_refuse_turnlog_parameters_in_their_url():
    from turnlog import RedisClusterStore, RedisStore

    with pytest.raises(InvalidInput, match=re.escape("pass prefix=... to RedisStore")):
        RedisStore("redis://127.0.0.1:6379/0?prefix=chat")
    with pytest.raises(InvalidInput, match="unknown URL parameter 'prefx'"):
        RedisStore("redis://127.0.0.1:6379/0?prefx=chat")
    with pytest.raises(InvalidInput, match=re.escape("pass prefix=... to RedisClusterStore")):
        RedisClusterStore("redis+cluster://127.0.0.1:7000?prefix=chat")


def test_a_postgres_url_reaches_its_schema_and_libpq_gets_its_parameters(postgres_dsn):
    import uuid

    import psycopg

    schema = f"url_{uuid.uuid4().hex[:8]}"
    name = f"turnlog url {uuid.uuid4().hex[:6]}"
    url = f"{postgres_dsn}?schema={schema}&application_name={name.replace(' ', '%20')}"
    try:
        with open_store(url) as store, psycopg.connect(postgres_dsn, autocommit=True) as admin:
            assert store.schema == schema
            SessionService(store).create("s")
            names = [
                r[0]
                for r in admin.execute(
                    "SELECT application_name FROM pg_stat_activity WHERE application_name = %s",
                    (name,),
                )
            ]
            assert names, "libpq never got application_name"
            tables = admin.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (schema,)
            ).fetchone()
            assert tables[0] > 0
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_postgres_refuses_a_bad_dsn_at_once():
    import time

    from turnlog import PostgresStore, StoreError

    with pytest.raises(InvalidInput, match="not a PostgreSQL connection string"):
        PostgresStore("host=127.0.0.1 nonsense_option=1")
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL") as raised:
        PostgresStore("postgresql://postgres@127.0.0.1:1/test", connect_timeout=10)
    assert time.monotonic() - started < 2  # not the 10 s of the pool's retries
    assert "\n" not in str(raised.value)


# -- open_store_async ------------------------------------------------------------------------


def test_open_store_async_opens_the_async_twins(tmp_path, monkeypatch):
    import asyncio

    from turnlog import AsyncMemoryStore, AsyncSqliteStore, open_store_async

    monkeypatch.chdir(tmp_path)

    async def main():
        store = await open_store_async("sqlite:///rel.db?busy_timeout=2")
        try:
            assert isinstance(store, AsyncSqliteStore) and store.path.name == "rel.db"
            assert (tmp_path / "rel.db").exists()  # open when returned
        finally:
            await store.close()
        memory = await open_store_async("memory://")
        assert isinstance(memory, AsyncMemoryStore)
        await memory.close()
        with pytest.raises(InvalidInput):
            await open_store_async("ftp://x")
        with pytest.raises(InvalidInput, match="both in the URL"):
            await open_store_async("sqlite:///x.db?busy_timeout=1", busy_timeout=2)

    asyncio.run(main())


def test_open_store_async_closes_a_store_it_could_not_open(tmp_path):
    import asyncio
    import threading

    from turnlog import CorruptData, open_store_async

    bad = tmp_path / "not-a-db.db"
    bad.write_bytes(b"this is no SQLite file" * 100)

    async def main():
        with pytest.raises(CorruptData):
            await open_store_async(str(bad))

    asyncio.run(main())
    assert not [t for t in threading.enumerate() if t.name.startswith("turnlog-sqlite")]
