"""One provider call and one streamed reply, the way every adapter makes them.

The adapters differ only in how they open the call and read its reply; the error handling (every
failure of the client or the reply becomes one `ModelError`) and the stream loop live here. The
blocking twin, turnlog/models/calls.py, is generated from this file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from turnlog.models._errors import model_error
from turnlog.models.base import ChatResponse, StreamEvent, reply_json

__all__ = ["StreamState", "call_model", "stream_model"]


class StreamState(Protocol):
    """What an adapter's stream reader does: `feed` an event (the text it adds), then
    `response()` once the stream ended."""

    def feed(self, event: object, /) -> str | None: ...

    def response(self) -> ChatResponse: ...


async def call_model(
    provider: str, model: str, open_call: Callable[[], Any], read: Callable[[object], ChatResponse]
) -> ChatResponse:
    """`read` of the reply `open_call()` gives.

    Raises:
        ModelError: the client failed, or the reply could not be read.
    """
    try:
        reply = await open_call()
        return read(reply_json(reply))
    except Exception as exc:  # every failure of the client or the reply: one error
        raise model_error(provider, model, exc) from exc


async def stream_model(
    provider: str, model: str, open_stream: Callable[[], Any], state: StreamState
) -> AsyncIterator[StreamEvent]:
    """The text of each event of the stream `open_stream()` gives, then the response.

    Raises:
        ModelError: the client failed, before or while streaming, or an event was malformed.
    """
    try:
        events = await open_stream()
    except Exception as exc:
        raise model_error(provider, model, exc) from exc
    try:
        async for event in events:
            text = state.feed(reply_json(event))
            if text:
                yield text
        response = state.response()
    except Exception as exc:  # a lost connection or a malformed event mid-stream
        raise model_error(provider, model, exc) from exc
    finally:
        await events.close()
    yield response
