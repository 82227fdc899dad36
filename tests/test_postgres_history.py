"""The PostgreSQL history index (schema 4): migrated from schema 3, written with the append,
removed with the session, searched in SQL; plain and partitioned, `simple` and `english`."""

import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg import sql

from turnlog import InvalidInput, Message, Session, SessionEvent, StoreError
from turnlog.codec import encode_body, to_micros
from turnlog.history import history_query
from turnlog.stores.postgres import PostgresStore, ddl, migrate
from turnlog.stores.postgres import schema as schema_module

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def pg_schema(postgres_dsn):
    name = f"tl_hist_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def admin(postgres_dsn):
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        yield conn


def q(text, schema):
    return sql.SQL(text).format(s=sql.Identifier(schema))


def history_rows(admin, schema, sid=None):
    if sid is None:
        return admin.execute(q("SELECT count(*) FROM {s}.history", schema)).fetchone()[0]
    return admin.execute(
        q("SELECT count(*) FROM {s}.history WHERE session_id = %s", schema), (sid,)
    ).fetchone()[0]


def said(sid, text, role="user"):
    return SessionEvent.for_message(sid, Message(role, text), timestamp=T0)


@pytest.mark.parametrize("partitions", [None, 3])
def test_a_schema_3_store_is_migrated_and_its_messages_indexed(
    postgres_dsn, pg_schema, admin, monkeypatch, partitions
):
    with monkeypatch.context() as patched:
        patched.setattr(ddl, "SCHEMA_VERSION", 3)
        patched.setattr(schema_module, "SCHEMA_VERSION", 3)
        migrate(postgres_dsn, schema=pg_schema, partitions=partitions)
    # What a schema-3 store held: rows as its append functions wrote them.
    events = {}
    for n, sid in enumerate(("a", "b", "c")):
        admin.execute(
            q("INSERT INTO {s}.sessions (id, created_at, metadata) VALUES (%s, now(), '{{}}')",
              pg_schema),
            (sid,),
        )  # fmt: skip
        events[sid] = [said(sid, f"the {sid} heron nested {n} {i}") for i in range(5)]
        events[sid].append(
            SessionEvent.for_message(sid, Message.user("a heron summary"), synthetic=True)
        )
        for seq, e in enumerate(events[sid], start=1):
            admin.execute(
                q("INSERT INTO {s}.events VALUES (%s, %s, %s, 'MESSAGE', %s, %s, %s, %s)",
                  pg_schema),
                (sid, seq, e.id, to_micros(T0), e.role, e.synthetic, encode_body(e)),
            )  # fmt: skip
            if partitions is not None:
                admin.execute(
                    q("INSERT INTO {s}.event_ids VALUES (%s, %s)", pg_schema), (e.id, sid)
                )
    steps = []
    monkeypatch.setattr(schema_module, "FILL_BATCH", 4)  # several batches
    assert migrate(postgres_dsn, schema=pg_schema, progress=steps.append) == 4
    assert any("migrating to version 4" in s for s in steps)
    assert [s for s in steps if "indexed" in s][-1].endswith("15 of 15 messages indexed")
    assert len([s for s in steps if "indexed" in s]) == 4
    assert history_rows(admin, pg_schema) == 15  # the synthetic ones are not indexed
    with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        hits = store.search_history("b", history_query("heron", k=10))
        assert sorted(h.event_id for h in hits) == sorted(e.id for e in events["b"][:5])
        assert all(h.said_at == T0 and "heron" in h.snippet for h in hits)
        assert store.search_history("c", history_query("nested 2"))[0].event_id.startswith("")
        assert {h.session_id for h in store.search_sessions(history_query("heron", k=20))} == {
            "a",
            "b",
            "c",
        }


@pytest.fixture(params=[None, 2], ids=["plain", "partitioned"])
def store(request, postgres_dsn, pg_schema):
    with PostgresStore(postgres_dsn, schema=pg_schema, partitions=request.param) as store:
        yield store


def test_the_index_rows_are_written_with_the_append_and_not_without(store, admin, pg_schema):
    store.create_session(Session("s", T0))
    store.append_events("s", [said("s", "first walrus")], 0)  # the one-statement path
    store.append_event(said("s", "second walrus"))  # at the end, whatever the version
    store.append_events("s", [said("s", "third walrus"), said("s", "x", "assistant")], 2)
    assert history_rows(admin, pg_schema, "s") == 4
    # A batch the database refuses (an id of another session) writes no index row either.
    store.create_session(Session("t", T0))
    taken = said("t", "taken walrus")
    store.append_events("t", [taken], 0)
    clash = SessionEvent(
        session_id="s", type=taken.type, id=taken.id, message=taken.message, timestamp=T0
    )
    with pytest.raises(InvalidInput):
        store.append_events("s", [said("s", "fourth walrus"), clash], 4)
    assert history_rows(admin, pg_schema, "s") == 4
    assert len(store.search_history("s", history_query("walrus", k=10))) == 3


def test_a_failed_index_write_undoes_the_append(store, admin, pg_schema):
    # all or nothing: make the history insert fail, and the events must not be there either
    store.create_session(Session("s", T0))
    admin.execute(
        q("ALTER TABLE {s}.history ADD CONSTRAINT no_zebra CHECK (NOT tsv @@ 'zebra')", pg_schema)
    )
    with pytest.raises(Exception, match="no_zebra"):
        store.append_events("s", [said("s", "a zebra"), said("s", "b", "assistant")], 0)
    with pytest.raises(Exception, match="no_zebra"):
        store.append_events("s", [said("s", "one zebra")], 0)
    assert store.version("s") == 0
    assert history_rows(admin, pg_schema) == 0


def test_deleting_and_expiring_remove_the_index_rows(store, admin, pg_schema):
    store.create_session(Session("s", T0))
    store.create_session(Session("old", T0, expires_at=T0))
    store.append_events("s", [said("s", "the lighthouse")], 0)
    store.append_events("old", [said("old", "the lighthouse")], 0)
    assert store.delete_expired(datetime(2027, 1, 1, tzinfo=UTC)) == 1
    assert history_rows(admin, pg_schema, "old") == 0
    assert store.delete_session("s")
    assert history_rows(admin, pg_schema) == 0
    store.create_session(Session("s", T0))
    new = said("s", "a new lighthouse")
    store.append_events("s", [new], 0)
    assert [h.event_id for h in store.search_history("s", history_query("lighthouse"))] == [new.id]


QUERIES = [
    "NEAR(a b", '"', "***", "AND OR NOT", "-x", "col:y", "a'b", "(", "^", "a & b | !c", "<->",
    "foo:*", "'''", "\\", "a:B", "!!", "x <2> y", "$$", "%s", "{}", "the", "the and of",
]  # fmt: skip


@pytest.mark.parametrize("config", ["simple", "english"])
def test_search_syntax_never_raises_and_configs_differ(postgres_dsn, pg_schema, config):
    with PostgresStore(postgres_dsn, schema=pg_schema, text_search=config) as store:
        store.create_session(Session("s", T0))
        running = said("s", "she was running the numbers: a & b | !c <-> 'x':* the end")
        store.append_events("s", [running], 0)
        for query in QUERIES:
            store.search_history("s", history_query(query))
            store.search_sessions(history_query(query))
        runs = store.search_history("s", history_query("runs"))
        stop = store.search_history("s", history_query("the"))
        if config == "english":  # stemmed: runs ~ running; "the" is a stop word, dropped
            assert [h.event_id for h in runs] == [running.id] and stop == []
        else:
            assert runs == [] and [h.event_id for h in stop] == [running.id]
        assert store.search_history("s", history_query("running numbers"))[0].score > 0


def test_the_text_search_configuration_is_checked(postgres_dsn, pg_schema):
    with pytest.raises(InvalidInput, match="text-search configuration"):
        PostgresStore(postgres_dsn, schema=pg_schema, text_search="no such; config")
    with pytest.raises(InvalidInput, match="no text-search configuration 'klingon'"):
        PostgresStore(postgres_dsn, schema=pg_schema, text_search="klingon")
    PostgresStore(postgres_dsn, schema=pg_schema, text_search="english").close()
    with pytest.raises(StoreError, match="'english', not 'simple'"):
        PostgresStore(postgres_dsn, schema=pg_schema, text_search="simple")
    PostgresStore(postgres_dsn, schema=pg_schema).close()  # None: as the schema has it


def test_a_one_session_search_uses_the_session_index(store, admin, pg_schema):
    for sid in ("s", "t"):
        store.create_session(Session(sid, T0))
        store.append_events(sid, [said(sid, f"pelican {i}") for i in range(50)], 0)
    admin.execute("SET enable_seqscan = off")  # a table this small would be scanned
    plan = "\n".join(
        r[0]
        for r in admin.execute(
            q(
                "EXPLAIN SELECT 1 FROM {s}.history h WHERE h.session_id = 's' "
                "AND h.tsv @@ {s}.history_tsquery(ARRAY['pelican'])",
                pg_schema,
            )
        )
    )
    assert "Bitmap Index Scan" in plan and "session_id = 's'" in plan.split("Index Cond")[1], plan
    gin = admin.execute(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
        "AND c.relname = 'history_search'",
        (pg_schema,),
    ).fetchone()[0]
    assert "gin (session_id, tsv)" in gin  # btree_gin is in the suite's server


def test_events_by_id_and_metadata_filters(store):
    store.create_session(Session("s", T0, metadata={"owner": "ann", "n": 1}))
    store.create_session(Session("t", T0, metadata={"owner": "bob", "n": True}))
    mine, theirs = said("s", "a marmot"), said("t", "a marmot")
    store.append_events("s", [mine], 0)
    store.append_events("t", [theirs], 0)
    assert [e.id for e in store.events_by_id("s", [theirs.id, mine.id])] == [mine.id]
    found = store.search_sessions(history_query("marmot"), metadata={"n": 1})
    assert [h.event_id for h in found] == [mine.id]  # True is not 1
    found = store.search_sessions(history_query("marmot"), metadata={"owner": "bob"})
    assert [h.event_id for h in found] == [theirs.id]
    assert store.search_sessions(history_query("marmot"), metadata={"owner": "eve"}) == []
