"""The CLI on any store: --store URL, $TURNLOG_STORE, and `turnlog migrate`."""

import sqlite3

from turnlog import SessionService, SqliteStore
from turnlog.cli import main


def test_store_url_is_used_instead_of_db(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "via-url.db"
    assert main(["--store", f"sqlite:///{path}", "demo"]) == 0
    capsys.readouterr()
    assert not (tmp_path / "turnlog.db").exists()
    with SqliteStore(path) as store:
        assert "demo-summary" in {s.id for s in store.list_sessions()}
    assert main(["sessions", "--store", f"sqlite:///{path}"]) == 0
    assert "demo-summary" in capsys.readouterr().out


def test_store_url_from_the_environment(tmp_path, capsys, monkeypatch):
    path = tmp_path / "env.db"
    with SessionService(SqliteStore(path)) as svc:
        svc.create("from-env")
    monkeypatch.setenv("TURNLOG_STORE", f"sqlite:///{path}")
    assert main(["sessions"]) == 0
    assert "from-env" in capsys.readouterr().out


def test_a_bad_store_url_is_one_line(capsys):
    assert main(["--store", "ftp://nowhere", "sessions"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("turnlog: error: unknown store URL scheme") and err.count("\n") == 1


def test_migrate_creates_a_sqlite_schema(tmp_path, capsys):
    path = tmp_path / "new.db"
    assert main(["migrate", "--store", f"sqlite:///{path}"]) == 0
    assert "schema is current" in capsys.readouterr().out
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert {"turnlog_schema", "turnlog_sessions", "turnlog_events"} <= tables


def test_migrate_on_postgresql(postgres_dsn, capsys):
    assert main(["migrate", "--store", postgres_dsn]) == 0
    assert "PostgreSQL schema is at version" in capsys.readouterr().out
    assert main(["migrate", "--store", postgres_dsn]) == 0  # again: nothing to do, no error


def test_migrate_help_has_an_example(capsys):
    assert main(["migrate", "--help"]) == 0
    assert "Example" in capsys.readouterr().out
