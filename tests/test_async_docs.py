"""docs/async.md: its examples run; the FastAPI one under a real uvicorn server."""

import re
import socket
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from turnlog import SessionService, SqliteStore

DOC = Path(__file__).resolve().parent.parent / "docs" / "async.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_first_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(python_blocks()[0], str(DOC), "exec"), {"__name__": "__main__"})
    assert "Hello from asyncio" in capsys.readouterr().out
    with SessionService(SqliteStore(tmp_path / "chat.db")) as service:
        assert service.version("user-42") == 1


def test_the_fastapi_example_serves_requests_and_closes_its_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    block = next(b for b in python_blocks() if "FastAPI(lifespan=lifespan)" in b)
    namespace = {"__name__": "chat_app"}
    exec(compile(block, str(DOC), "exec"), namespace)
    app = namespace["app"]
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            first = client.post("/chats/c1/messages", json={"text": "hi"}).json()
            second = client.post("/chats/c1/messages", json={"text": "again"}).json()
            other = client.post("/chats/c2/messages", json={"text": "elsewhere"}).json()
        assert first == {"reply": "You said: hi", "version": 2}
        assert second == {"reply": "You said: again", "version": 4}
        assert other["version"] == 2
        service = app.state.sessions
    finally:
        server.should_exit = True
        thread.join(20)
    assert not thread.is_alive()
    # the lifespan closed the store: its worker threads are gone
    assert not [t for t in threading.enumerate() if t.name.startswith("turnlog-sqlite")]
    assert service.store._closed
    with SessionService(SqliteStore(tmp_path / "chat.db")) as blocking:
        texts = [m.text for m in blocking.view_messages("c1")]
    assert texts == ["hi", "You said: hi", "again", "You said: again"]
