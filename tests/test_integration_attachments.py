"""The framework adapters with images large enough to be stored as attachments: the bytes are
stored once, apart from the events, and every adapter reads its messages back byte for byte."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import sqlite3
from pathlib import Path

from PIL import Image

from turnlog import ImagePart, SessionService, SqliteStore
from turnlog.service_async import AsyncSessionService
from turnlog.stores.sqlite_async import AsyncSqliteStore


def noise_png(seed: int, size: int = 160) -> bytes:
    """A PNG of noise, about 75 KB: over the 16 KiB at which bytes are stored apart."""
    pixels = bytearray()
    block = bytes([seed])
    while len(pixels) < size * size * 3:
        block = hashlib.sha256(block).digest()
        pixels += block
    image = Image.frombytes("RGB", (size, size), bytes(pixels[: size * size * 3]))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def ref(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def stored_images(db: Path) -> list[tuple[str, int]]:
    """What the SQLite file holds apart: (ref, size) of each attachment."""
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT ref, size FROM turnlog_attachments ORDER BY ref").fetchall()


def image_parts(service: SessionService, session_id: str) -> list[ImagePart]:
    found = []
    for event in service.events(session_id):
        assert event.message is not None
        found += [p for p in event.message.parts if isinstance(p, ImagePart)]
    return found


def test_langchain_stores_an_image_once_and_gives_it_back(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from turnlog.integrations.langchain import TurnlogChatMessageHistory

    png = noise_png(1)
    block = {"type": "image", "base64": base64.b64encode(png).decode(), "mime_type": "image/png"}
    sent = [
        HumanMessage([{"type": "text", "text": "what is this?"}, block], id="h1"),
        AIMessage("noise", id="a1"),
        HumanMessage([{"type": "text", "text": "and again?"}, block], id="h2"),
        AIMessage("the same noise", id="a2"),
    ]
    db = tmp_path / "lc.db"
    with SessionService(SqliteStore(db)) as service:
        TurnlogChatMessageHistory("s", service).add_messages(sent)
        parts = image_parts(service, "s")
        assert [(p.data, p.ref) for p in parts] == [(None, ref(png))] * 2
    assert stored_images(db) == [(ref(png), len(png))]
    with SessionService(SqliteStore(db)) as service:  # a fresh process, as it were
        assert TurnlogChatMessageHistory("s", service).messages == sent


def test_pydantic_ai_stores_binary_content_once_and_gives_it_back(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from pydantic_ai.messages import (
        BinaryContent,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        TextPart,
        UserPromptPart,
    )

    from turnlog.integrations.pydantic_ai import load_history, save_history

    png = noise_png(2)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    messages = [
        ModelRequest(
            parts=[
                UserPromptPart(["look:", BinaryContent(png, media_type="image/png")], timestamp=t0)
            ]
        ),
        ModelResponse(parts=[TextPart("noise")], timestamp=t0),
    ]
    db = tmp_path / "pa.db"
    with SessionService(SqliteStore(db)) as service:
        save_history(service, "s", messages)
        assert [p.ref for p in image_parts(service, "s")] == [ref(png)]
    assert stored_images(db) == [(ref(png), len(png))]
    with SessionService(SqliteStore(db)) as service:
        loaded = load_history(service, "s")
    content = loaded[0].parts[0].content
    assert isinstance(content[1], BinaryContent) and content[1].data == png
    assert ModelMessagesTypeAdapter.dump_json(loaded) == ModelMessagesTypeAdapter.dump_json(
        messages
    )


def test_the_agents_sdk_stores_an_input_image_once_and_gives_it_back(tmp_path: Path) -> None:
    from turnlog.integrations.openai_agents import TurnlogSession

    png = noise_png(3)
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    items = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": url, "detail": "auto"},
            ],
        }
    ]
    db = tmp_path / "ag.db"

    async def scenario() -> None:
        async with AsyncSessionService(AsyncSqliteStore(db)) as service:
            session = TurnlogSession("s", service)
            await session.add_items(items)
            (event,) = await service.events("s")
            assert event.message is not None
            (image,) = [p for p in event.message.parts if isinstance(p, ImagePart)]
            assert (image.data, image.ref) == (None, ref(png))
        async with AsyncSessionService(AsyncSqliteStore(db)) as service:
            assert await TurnlogSession("s", service).get_items() == items

    asyncio.run(scenario())
    assert stored_images(db) == [(ref(png), len(png))]
