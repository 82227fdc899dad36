"""`AsyncOpenAIChatModel`: a chat model over the official `openai` package (Chat Completions).

Needs the `openai` extra: `pip install 'turnlog[openai]'`. Works with OpenAI and with any
server that speaks Chat Completions (Ollama, vLLM, llama.cpp server, LM Studio): point
`base_url` at it. The blocking twin, `OpenAIChatModel` in turnlog/models/openai.py, is
generated from this file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Self

import openai

from turnlog.errors import InvalidInput
from turnlog.events import Message
from turnlog.models.base import ChatResponse, StreamEvent, client_settings, whole_summary
from turnlog.models.calls_async import call_model, stream_model
from turnlog.models.openai_format import (
    OpenAIStream,
    openai_tools,
    response_from_openai,
    to_openai_messages,
)
from turnlog.toolsearch.base import ToolReference

__all__ = ["AsyncOpenAIChatModel"]

PROVIDER = "openai"


def openai_client(
    client: openai.AsyncOpenAI | None, given: dict[str, Any]
) -> tuple[openai.AsyncOpenAI, bool]:
    """`client`, or one built from the `client_settings` `given`; and whether it was built here
    (so that the model closes it).

    Raises:
        InvalidInput: the client cannot be built (no API key anywhere, say).
    """
    if client is not None:
        return client, False
    try:
        return openai.AsyncOpenAI(**given), True
    except openai.OpenAIError as exc:
        raise InvalidInput(
            f"cannot build an OpenAI client: {exc} (pass api_key=, set OPENAI_API_KEY, or "
            "pass client=)"
        ) from exc


class AsyncOpenAIChatModel:
    """A chat model spoken to in the OpenAI Chat Completions wire format.

    Pass your own configured `openai.AsyncOpenAI` client (Azure, proxies, retries and keys are
    then yours), or let the model build one from `base_url` and `api_key` (the API key falls
    back to OPENAI_API_KEY, as in the client). The constructor does no I/O.

    Args:
        model: the model name sent with each request (for example "gpt-4o-mini", "llama3.2").
        client: your client; then `base_url`, `api_key`, `timeout` and `max_retries` must not
            be given.
        base_url: the API's root, for example "http://localhost:11434/v1" for Ollama.
        api_key: the key; None reads OPENAI_API_KEY.
        timeout: seconds per request (None: the client's default).
        max_retries: how often the client retries 408/429/5xx and lost connections
            (None: the client's default, 2).
        options: further fields of the request body, sent with every call as the API names
            them (through the client's `extra_body`, so any field the server knows works)
            (`{"temperature": 0.2, "max_completion_tokens": 512}`).

    Raises:
        InvalidInput: a blank model, `client` together with a setting for building one, or no
            API key at all (neither `api_key` nor OPENAI_API_KEY).
    """

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput(f"model must be a model name, got {model!r}")
        given = client_settings(
            client, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        client, self._owns_client = openai_client(client, given)
        self.model = model
        self.client = client
        self.options: dict[str, Any] = dict(options or {})

    async def close(self) -> None:
        """Close the client when this model built it (a client you passed stays open)."""
        if self._owns_client:
            await self.client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(messages)}
        if self.options:
            request["extra_body"] = self.options
        if tools:
            request["tools"] = openai_tools(tools)
        return request

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> ChatResponse:
        """The model's reply to `messages`, offered `tools`.

        Returns:
            The reply: the assistant message (text and/or tool calls), usage, model, stop
            reason.

        Raises:
            ModelError: the provider failed the call (see `ModelError`).
        """
        request = self._request(messages, tools)
        return await call_model(
            PROVIDER,
            self.model,
            lambda: self.client.chat.completions.create(**request),
            response_from_openai,
        )

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """The reply as it arrives: text deltas (`str`), then the `ChatResponse` last.

        Asks for the usage in the last chunk (`stream_options.include_usage`).

        Raises:
            ModelError: the provider failed the call, before or while streaming.
        """
        request = self._request(messages, tools)
        return stream_model(
            PROVIDER,
            self.model,
            lambda: self.client.chat.completions.create(
                **request, stream=True, stream_options={"include_usage": True}
            ),
            OpenAIStream(),
        )

    async def complete(self, messages: Sequence[Message]) -> Message:
        """The reply's assistant message: `ChatModelSummarizer` calls this.

        A reply the model stopped at its token cap is refused rather than returned cut short
        (a summary cut mid-sentence loses what it leaves out): the summarizer then declines.

        Raises:
            ModelError: the provider failed the call, or the reply hit the token cap.
        """
        request = self._request(messages, None)
        response = await call_model(
            PROVIDER,
            self.model,
            lambda: self.client.chat.completions.create(**request),
            lambda body: whole_summary(response_from_openai(body)),
        )
        return response.message
