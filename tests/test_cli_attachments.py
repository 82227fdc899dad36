"""`turnlog export` and `turnlog import` with attachments: the JSONL round trip is exact with the
bytes embedded or in side files (`--attachments DIR`), each side file written once; the provider
formats and the HTML page carry the bytes; a missing or damaged side file is a clear error."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from turnlog import ImagePart, Message, SessionService, SqliteStore, ToolCall, ToolResult
from turnlog.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def noise(seed: str, size: int = 40_000) -> bytes:
    out = bytearray()
    block = seed.encode()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return b"\x89PNG\r\n\x1a\n" + bytes(out[: size - 8])


def ref(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A session `s` whose user message and tool result hold images stored as attachments,
    the first image twice."""
    path = tmp_path / "a.db"
    one, two = noise("one"), noise("two")
    with SessionService(SqliteStore(path)) as svc:
        svc.create("s")
        svc.append_message("s", Message.user("see", ImagePart("image/png", data=one)))
        call = ToolCall("c1", "shot", "{}")
        svc.append_message("s", Message.assistant(tool_calls=[call]))
        result = ToolResult("c1", "shot", "", parts=(ImagePart("image/png", data=two),))
        svc.append_message("s", Message.tool([result]))
        svc.append_message("s", Message.assistant("two pictures"))
        svc.append_message("s", Message.user("again", ImagePart("image/png", data=one)))
        svc.append_message("s", Message.assistant("the first one"))
    return path


def log_of(path: Path, sid: str) -> list:
    with SessionService(SqliteStore(path)) as svc:
        return [(e.id, e.message) for e in svc.events(sid)]


def blobs_of(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT ref, size FROM turnlog_attachments ORDER BY ref").fetchall()


def test_jsonl_embeds_the_bytes_and_imports_back_exactly(capsys, db, tmp_path):
    dump = tmp_path / "s.jsonl"
    assert run(capsys, "--store", db, "export", "s", "--log", "-o", dump)[0] == 0
    text = dump.read_text()
    assert base64.b64encode(noise("one")).decode()[:200] in text  # embedded
    assert "sha256:" not in text
    other = tmp_path / "b.db"
    assert run(capsys, "--store", other, "import", dump)[0] == 0
    assert log_of(other, "s") == log_of(db, "s")  # the same events, the same refs
    assert blobs_of(other) == blobs_of(db) and len(blobs_of(other)) == 2


def test_side_files_are_written_once_and_read_back(capsys, db, tmp_path):
    dump, folder = tmp_path / "s.jsonl", tmp_path / "files"
    code, _, _ = run(capsys, "--store", db, "export", "s", "--log", "-o", dump,
                     "--attachments", folder)  # fmt: skip
    assert code == 0
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(ref(d).replace(":", "-") for d in (noise("one"), noise("two")))
    assert (folder / ref(noise("one")).replace(":", "-")).read_bytes() == noise("one")
    text = dump.read_text()
    assert ref(noise("one")) in text and base64.b64encode(noise("one")).decode()[:200] not in text
    other = tmp_path / "b.db"
    assert run(capsys, "--store", other, "import", dump, "--attachments", folder)[0] == 0
    assert log_of(other, "s") == log_of(db, "s")
    assert blobs_of(other) == blobs_of(db)


def test_an_import_without_its_side_files_is_refused_and_writes_nothing(capsys, db, tmp_path):
    dump, folder = tmp_path / "s.jsonl", tmp_path / "files"
    run(capsys, "--store", db, "export", "s", "-o", dump, "--attachments", folder)
    other = tmp_path / "b.db"
    code, _, err = run(capsys, "--store", other, "import", dump)
    assert code != 0 and "--attachments DIR" in err and not other.exists()
    victim = folder / ref(noise("two")).replace(":", "-")
    victim.write_bytes(b"not the picture")
    code, _, err = run(capsys, "--store", other, "import", dump, "--attachments", folder)
    assert code != 0 and "does not hold the bytes" in err and not other.exists()
    victim.unlink()
    code, _, err = run(capsys, "--store", other, "import", dump, "--attachments", folder)
    assert code != 0 and ref(noise("two")) in err and not other.exists()


def test_provider_formats_and_the_html_page_carry_the_bytes(capsys, db, tmp_path):
    code, out, _ = run(capsys, "--store", db, "export", "s", "--format", "openai")
    assert code == 0
    urls = [
        p["image_url"]["url"]
        for m in json.loads(out)["messages"]
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]
    assert urls and urls[0] == "data:image/png;base64," + base64.b64encode(noise("one")).decode()
    code, out, _ = run(capsys, "--store", db, "export", "s", "--format", "anthropic")
    assert code == 0 and base64.b64encode(noise("two")).decode() in out
    page = tmp_path / "s.html"
    assert run(capsys, "--store", db, "export", "s", "--format", "html", "-o", page)[0] == 0
    assert base64.b64encode(noise("two")).decode() in page.read_text()
    code, _, err = run(capsys, "--store", db, "export", "s", "--format", "html",
                       "--attachments", tmp_path / "x")  # fmt: skip
    assert code != 0 and "--attachments applies to --format jsonl" in err
