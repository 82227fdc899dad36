"""`turnlog search`: the history index from the command line, on a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

from turnlog import Message, SessionService, SqliteStore
from turnlog.cli import main
from turnlog.compaction import CompactionWindow, WindowCompactionStrategy


def _store(path: Path) -> None:
    with SessionService(SqliteStore(path)) as svc:
        for sid, owner, fact in (
            ("alice", "u-1", "my dentist appointment moved to March 3"),
            ("bob", "u-2", "the dentist said my teeth are fine"),
        ):
            svc.create(sid, metadata={"owner": owner})
            svc.append_message(sid, Message.user(fact))
            svc.append_message(sid, Message.assistant("Noted."))
            for n in range(4):
                svc.append_message(sid, Message.user(f"filler question {n}"))
                svc.append_message(sid, Message.assistant(f"filler answer {n}"))
            svc.compact(
                sid, lambda _: True, WindowCompactionStrategy(CompactionWindow.last_turns(1))
            )


def test_search_finds_a_covered_event_in_every_session(tmp_path, capsys):
    db = tmp_path / "t.db"
    _store(db)
    assert main(["--db", str(db), "search", "dentist", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert {h["session"] for h in hits} == {"alice", "bob"}
    assert all(h["seq"] == 1 and h["role"] == "user" for h in hits)
    assert main(["--db", str(db), "search", "dentist appointment"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("alice  #1  ") and "March 3" in out


def test_search_scopes_by_session_and_metadata(tmp_path, capsys):
    db = tmp_path / "t.db"
    _store(db)
    assert main(["--db", str(db), "search", "dentist", "--where", "owner=u-2", "--json"]) == 0
    assert [h["session"] for h in json.loads(capsys.readouterr().out)] == ["bob"]
    assert main(["--db", str(db), "search", "dentist", "--session", "alice", "--json"]) == 0
    assert [h["session"] for h in json.loads(capsys.readouterr().out)] == ["alice"]
    assert main(["--db", str(db), "search", "dentist", "--before", "2000-01-01", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["--db", str(db), "search", "zeppelin"]) == 0
    assert "no event matches" in capsys.readouterr().out


def test_search_refuses_a_blank_query_and_a_bad_date(tmp_path, capsys):
    db = tmp_path / "t.db"
    _store(db)
    assert main(["--db", str(db), "search", "   "]) == 2
    assert "must not be blank" in capsys.readouterr().err
    assert main(["--db", str(db), "search", "x", "--after", "yesterday"]) == 2
    assert "ISO 8601" in capsys.readouterr().err
    assert main(["--db", str(db), "search", "x", "--where", "owner"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err
