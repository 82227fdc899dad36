"""The turn runner sends a model the bytes of the attachments in its view: the store keeps them
apart, the runner puts them back into the parts for the model (and through the real wire format,
as a data: URL)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from model_servers import ScriptedServer, openai_completion
from turnlog import ImagePart, Message, SessionChat, SessionService, SqliteStore
from turnlog.testing import ScriptedChatModel

PICTURE = b"\x89PNG\r\n\x1a\n" + hashlib.sha256(b"px").digest() * 1000  # 32 KB: stored apart


def _with_picture(path: Path) -> SessionService:
    service = SessionService(SqliteStore(path))
    service.create("s")
    service.append_message("s", Message.user("Keep this:", ImagePart("image/png", data=PICTURE)))
    service.append_message("s", Message.assistant("Kept."))
    (first, _) = service.events("s")
    assert first.message is not None and first.message.parts[1].ref is not None  # apart
    return service


def test_the_model_gets_the_bytes_of_an_attachment(tmp_path: Path) -> None:
    model = ScriptedChatModel(["A picture of noise."])
    with _with_picture(tmp_path / "a.db") as service:
        SessionChat(service, model).send("s", "What was it?")
    (sent,) = model.calls
    image = sent[0].parts[1]
    assert isinstance(image, ImagePart) and image.ref is None and image.data == PICTURE


def test_the_openai_wire_format_carries_an_attachment_as_a_data_url(tmp_path: Path) -> None:
    from turnlog.models import OpenAIChatModel

    server = ScriptedServer()
    try:
        server.reply_json(openai_completion("Noise."))
        model = OpenAIChatModel(
            model="gpt-test", base_url=server.url + "/v1", api_key="sk-test", max_retries=0
        )
        with _with_picture(tmp_path / "a.db") as service:
            SessionChat(service, model).send("s", "What was it?")
        (request,) = server.requests
    finally:
        server.close()
    content = request.body["messages"][0]["content"]
    urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert urls == ["data:image/png;base64," + base64.b64encode(PICTURE).decode()]
