"""The CLI tried as a new user would: which store a command uses and how messages name it, URL
parameters, unreachable servers, bad files and bad arguments. Each case runs the real CLI and
checks the one error line and the exit code."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from turnlog import SessionService, SqliteStore
from turnlog.cli import main, target

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *argv):
    """Run `turnlog argv...` in-process; returns (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err, code, expected_code):
    """The single `turnlog: error:` line of a failed command."""
    assert code == expected_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("turnlog: error: "), err
    assert "unexpected" not in err and "a bug in turnlog" not in err
    return lines[0]


def fails(capsys, expected_code, *argv):
    """Run a command that must fail; returns its one error line."""
    code, _, err = run(capsys, *argv)
    return one_line(err, code, expected_code)


@pytest.fixture(autouse=True)
def no_store_from_the_environment(monkeypatch):
    monkeypatch.delenv("TURNLOG_STORE", raising=False)
    monkeypatch.delenv("TURNLOG_DB", raising=False)


def sessions_in(path):
    with SqliteStore(path) as store:
        return {s.id for s in store.list_sessions()}


# -- the store a command uses ------------------------------------------------------------------


def test_the_demo_names_the_store_url_and_repeats_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path}/via url.db"
    code, out, err = run(capsys, "--store", url, "demo")
    assert code == 0, err
    assert "turnlog.db" not in out
    assert f"four sessions of {url};" in " ".join(out.split())
    assert f"The five sessions are in {url}. Try next:" in out
    assert f"  turnlog --store '{url}' sessions" in out  # quoted for the shell
    assert f"  turnlog --store '{url}' show demo-summary --log" in out
    assert sessions_in(tmp_path / "via url.db") >= {"demo-summary"}
    assert not (tmp_path / "turnlog.db").exists()


def test_the_demo_repeats_the_db_it_was_given(tmp_path, capsys):
    db = tmp_path / "with space" / "demo.db"
    db.parent.mkdir()
    code, out, _ = run(capsys, "--db", db, "demo")
    assert code == 0
    assert f"The five sessions are in {db}. Try next:" in out
    assert f"  turnlog --db '{db}' compact demo-last-turns --last-turns 1" in out


def test_from_the_environment_the_demo_adds_no_option(tmp_path, capsys, monkeypatch):
    db = tmp_path / "env.db"
    monkeypatch.setenv("TURNLOG_STORE", f"sqlite:///{db}")
    code, out, _ = run(capsys, "demo")
    assert code == 0
    assert f"The five sessions are in sqlite:///{db}. Try next:\n  turnlog sessions\n" in out


def test_an_explicit_db_beats_the_environment(tmp_path, capsys, monkeypatch):
    env_db, flag_db = tmp_path / "env.db", tmp_path / "flag.db"
    for path, session_id in ((env_db, "from-env"), (flag_db, "from-flag")):
        with SessionService(SqliteStore(path)) as svc:
            svc.create(session_id)
    monkeypatch.setenv("TURNLOG_STORE", f"sqlite:///{env_db}")
    code, out, _ = run(capsys, "--db", flag_db, "sessions")
    assert code == 0 and "from-flag" in out and "from-env" not in out
    code, out, _ = run(capsys, "sessions", "--db", flag_db)  # after the command too
    assert code == 0 and "from-flag" in out
    monkeypatch.setenv("TURNLOG_DB", str(flag_db))  # $TURNLOG_STORE beats $TURNLOG_DB
    code, out, _ = run(capsys, "sessions")
    assert code == 0 and "from-env" in out


def test_messages_name_the_store_in_use(tmp_path, capsys, monkeypatch):
    db = tmp_path / "named.db"
    with SessionService(SqliteStore(db)):
        pass
    monkeypatch.setenv("TURNLOG_STORE", f"sqlite:///{db}")
    line = fails(capsys, 1, "show", "nope")
    assert f"session 'nope' does not exist in sqlite:///{db}" in line
    code, out, _ = run(capsys, "sessions")
    assert code == 0 and out.startswith(f"no sessions in sqlite:///{db}:")
    missing = f"sqlite:///{tmp_path}/missing.db"
    line = fails(capsys, 1, "--store", missing, "sessions")
    assert f"no turnlog database at {missing}" in line
    assert not (tmp_path / "missing.db").exists()


def test_db_and_store_together_are_refused(tmp_path, capsys):
    code, _, err = run(capsys, "--db", tmp_path / "a.db", "--store", "memory://", "sessions")
    assert "not both" in one_line(err, code, 2)
    code, _, err = run(capsys, "--db", "", "sessions")
    assert "--db needs a value" in one_line(err, code, 2)


def test_the_demo_on_memory_says_nothing_is_kept(capsys):
    code, out, _ = run(capsys, "--store", "memory://", "demo")
    assert code == 0
    assert "The five sessions were in memory://, which keeps nothing" in out
    assert "turnlog --db /tmp/demo.db demo" in out


def test_a_password_is_never_printed():
    args = argparse.Namespace(db=None, store="postgresql://app:s3cret@db.internal:5432/chat")
    where = target(args)
    assert where.name == "postgresql://app:***@db.internal:5432/chat"
    assert where.again == ("--store", where.name) and where.hidden_password
    assert where.url == args.store  # the store itself still gets the password


# -- URL parameters ----------------------------------------------------------------------------


def test_a_redis_prefix_from_the_url(redis_url, capsys, tmp_path):
    import redis

    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    url = f"{redis_url}?prefix={prefix}&connect_timeout=2"
    client = redis.Redis.from_url(redis_url)
    try:
        path = tmp_path / "chat.json"
        path.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
        code, out, err = run(capsys, "--store", url, "import", path)
        assert code == 0, err
        assert client.keys(f"{prefix}*"), "nothing was written under the prefix"
        code, out, _ = run(capsys, "--store", url, "sessions", "--json")
        assert [s["id"] for s in json.loads(out)] == ["chat"]
    finally:
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()


def test_a_postgres_schema_and_libpq_parameters_from_the_url(postgres_dsn, capsys):
    import psycopg

    schema = f"cli_{uuid.uuid4().hex[:8]}"
    url = f"{postgres_dsn}?schema={schema}&application_name=turnlog%20cli%20test&sslmode=disable"
    try:
        code, out, err = run(capsys, "--store", url, "demo")
        assert code == 0, err
        assert f"The five sessions are in {url}." in out
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            count = conn.execute(f'SELECT count(*) FROM "{schema}".sessions').fetchone()
        assert count == (5,)  # the four copies and demo-files
        code, _, err = run(capsys, "--store", url, "migrate")
        assert code == 0, err
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize(
    ("url", "named", "listed"),
    [
        ("redis://127.0.0.1:6379/0?prefx=chat", "'prefx'", "prefix"),
        ("postgresql://postgres@127.0.0.1/test?prefix=chat", "'prefix'", "schema"),
        ("redis+cluster://127.0.0.1:7000?db=1", "'db'", "prefix"),
        ("memory://?schema=x", "'schema'", "none"),
        ("sqlite:///x.db?schema=x", "'schema'", "busy_timeout"),
    ],
)
def test_an_unknown_url_parameter_is_refused_by_name(url, named, listed, capsys, tmp_path):
    started = time.monotonic()
    line = fails(capsys, 2, "--store", url, "sessions")
    assert f"unknown URL parameter {named}" in line
    assert f"turnlog reads {listed}" in line
    assert time.monotonic() - started < 2
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize(
    "query", ["connect_timeout=abc", "connect_timeout=0", "schema=", "schema=a&schema=b"]
)
def test_a_bad_url_parameter_value_is_exit_2(query, capsys):
    url = f"postgresql://postgres@127.0.0.1:1/test?{query}"
    line = fails(capsys, 2, "--store", url, "sessions")
    assert query.split("=")[0] in line


# -- unreachable servers -----------------------------------------------------------------------

UNREACHABLE = {
    "postgres closed port": "postgresql://postgres@127.0.0.1:1/test",
    "postgres unknown host": "postgresql://postgres@no-such-host.invalid/test",
    "redis closed port": "redis://127.0.0.1:1/0",
    "redis unknown host": "redis://no-such-host.invalid:6379/0",
}


@pytest.mark.parametrize("case", sorted(UNREACHABLE))
@pytest.mark.parametrize("command", [["sessions"], ["show", "x"], ["demo"]])
def test_an_unreachable_server_is_one_fast_line(case, command, capsys):
    started = time.monotonic()
    line = fails(capsys, 1, "--store", UNREACHABLE[case], *command)
    elapsed = time.monotonic() - started
    assert elapsed < 2.5, f"took {elapsed:.1f}s"
    assert "cannot connect to" in line or "cannot reach" in line, line
    assert "may or may not" not in line  # nothing was sent, so nothing may have landed


@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_the_connect_timeout_is_short_by_default_and_can_be_set(silent_server, capsys):
    url = f"postgresql://postgres@127.0.0.1:{silent_server}/test"
    started = time.monotonic()
    line = fails(capsys, 1, "--store", url, "sessions")
    default = time.monotonic() - started
    assert "cannot connect to PostgreSQL" in line
    assert 2.5 < default < 6, f"the CLI waited {default:.1f}s (its default is 3s)"
    started = time.monotonic()
    fails(capsys, 1, "--store", f"{url}?connect_timeout=2", "sessions")
    assert time.monotonic() - started < default - 0.5  # libpq waits at least 2s


# -- bad files and bad arguments ---------------------------------------------------------------


def import_error(capsys, tmp_path, text, *options):
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    db = tmp_path / "fresh.db"
    code, out, err = run(capsys, "--db", db, "import", path, *options)
    assert out == "" and not db.exists()
    return one_line(err, code, 2)


def test_a_control_character_in_json_is_reported_once(capsys, tmp_path):
    line = import_error(capsys, tmp_path, '[{"role": "user", "content": "a\x01b"}]')
    assert "at at" not in line
    assert "Invalid control character at line 1 column" in line


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"foo": 1}', 'without a "messages" or "role" key'),
        ('{"model": "gpt-4o", "input": [{"role": "user", "content": "hi"}]}', "Responses API"),
        ('[{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]',
         "Responses API"),
        ('[{"content": "hi"}]', 'no "role"'),
    ],
)  # fmt: skip
def test_an_unknown_format_says_what_is_accepted(text, said, capsys, tmp_path):
    line = import_error(capsys, tmp_path, text)
    assert "unknown role None" not in line
    assert said in line
    assert "turnlog import reads a JSON list of OpenAI chat-completions messages" in line
    assert "ShareGPT" in line


@pytest.mark.parametrize("jsonl", [False, True])
def test_a_deeply_nested_file_is_refused(jsonl, capsys, tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    text = f'{{"role": "user", "content": "a"}}\n{deep}\n' if jsonl else deep
    assert "JSON nested too deeply" in import_error(capsys, tmp_path, text)


def test_an_empty_session_option_is_refused(capsys, tmp_path):
    line = import_error(capsys, tmp_path, '[{"role": "user", "content": "a"}]', "--session", "")
    assert "session id" in line


def test_a_missing_directory_is_named(capsys, tmp_path):
    db = tmp_path / "no-such-dir" / "t.db"
    line = fails(capsys, 1, "--db", db, "demo")
    assert f"the directory {db.parent} does not exist" in line
    assert "unable to open database file" not in line


def test_a_missing_extra_names_its_pip_line_once(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "turnlog.stores.postgres", raising=False)
    line = fails(capsys, 1, "--store", "postgresql://x@127.0.0.1:1/t", "sessions")
    assert line.count("pip install") == 1
    assert "PostgresStore needs psycopg, which is not installed" in line


def cli(*argv, cwd, **env_vars):
    """The real CLI in a subprocess, with byte arguments as a shell would pass them."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONWARNINGS": "error", **env_vars}
    return subprocess.run(
        [sys.executable, "-m", "turnlog.cli", *argv],
        capture_output=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_non_utf8_arguments_are_clear_errors(tmp_path):
    db = tmp_path / "t.db"
    with SessionService(SqliteStore(db)) as svc:
        svc.create("s")
    cases = [
        (["--db", str(db), "show", b"caf\xe9"], b"the session argument is not valid UTF-8"),
        (["--db", str(db), "delete", b"\xff"], b"the session argument is not valid UTF-8"),
        (["--store", b"sqlite:///caf\xe9.db", "sessions"], b"the store argument is not valid"),
    ]
    named = tmp_path / os.fsdecode(b"caf\xe9.json")
    named.write_text('[{"role": "user", "content": "a"}]', encoding="utf-8")
    cases.append((["--db", str(db), "import", bytes(named)], b"the file's name is not valid"))
    for argv, said in cases:
        out = cli(*argv, cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert out.stderr.count(b"\n") == 1 and out.stderr.startswith(b"turnlog: error: ")
        assert said in out.stderr, out.stderr
    with SessionService(SqliteStore(db)) as svc:
        assert [s.id for s in svc.sessions()] == ["s"]
    # a file path that is not UTF-8 is fine: file systems allow it. Messages show the odd byte
    # as an escape, even where stdout is strict UTF-8 (it cannot encode the byte at all)
    odd = bytes(tmp_path / os.fsdecode(b"\xff.db"))
    out = cli("--db", odd, "demo", cwd=tmp_path, PYTHONIOENCODING="utf-8")
    assert out.returncode == 0, out.stderr
    assert b"\\udcff.db' sessions" in out.stdout
    assert os.path.exists(odd)


def test_docs_cli_page_documents_stores_parameters_timeout_and_escaping():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## Which store a command uses", 1)[1].split("\n## `turnlog", 1)[0]
    order = ["--db PATH", "$TURNLOG_STORE", "$TURNLOG_DB", "turnlog.db"]
    assert [section.index(word) for word in order] == sorted(section.index(w) for w in order)
    for needed in ("An explicit option always beats the environment", "?schema=", "prefix",
                   "connect_timeout", "3 seconds", "refused by name", r"\x1b]0;title\x07",
                   "U+0080-U+009F", "bidi"):  # fmt: skip
        assert needed in section, needed
