"""`AsyncOpenAIResponsesModel`: a chat model over the official `openai` package (Responses API).

Needs the `openai` extra: `pip install 'turnlog[openai]'`. The blocking twin,
`OpenAIResponsesModel` in turnlog/models/openai_responses.py, is generated from this file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Self

import openai

from turnlog.errors import InvalidInput
from turnlog.events import Message
from turnlog.models.base import ChatResponse, StreamEvent, client_settings
from turnlog.models.calls_async import call_model, stream_model
from turnlog.models.openai_async import openai_client
from turnlog.models.responses_format import (
    ResponsesStream,
    chain_start,
    response_from_responses,
    responses_tools,
    to_responses_input,
    whole_summary,
)
from turnlog.toolsearch.base import ToolReference

__all__ = ["AsyncOpenAIResponsesModel"]

PROVIDER = "openai"


class AsyncOpenAIResponsesModel:
    """A chat model spoken to in the OpenAI Responses wire format (`/v1/responses`).

    Stateless by default: each request sends the whole conversation with `store: false`, and
    asks for the reasoning's encrypted content (`include: ["reasoning.encrypted_content"]`), so
    a reasoning model's reasoning items come back in the reply, are kept as
    `ReasoningPart("openai", ...)` in the assistant message, and are sent back as received, in
    their place, within the tool loop (see `turnlog.models.responses_format`). Nothing is kept
    on OpenAI's side, and compaction shrinks what the model sees.

    With `previous_response_id=True`, OpenAI keeps the conversation instead: each reply is
    stored (`store: true`), its id is kept in the assistant message's metadata, and the next
    request names it (`previous_response_id`) and sends only the messages after it, with the
    system prompt as `instructions` (which the API does not carry over from one response to
    the next).

    Pass your own configured `openai.AsyncOpenAI` client, or let the model build one from
    `base_url` and `api_key` (the key falls back to OPENAI_API_KEY, as in the client). The
    constructor does no I/O.

    Args:
        model: the model name sent with each request (for example "gpt-5-mini").
        client: your client; then `base_url`, `api_key`, `timeout` and `max_retries` must not
            be given.
        base_url: the API's root, for example "https://api.openai.com/v1".
        api_key: the key; None reads OPENAI_API_KEY.
        timeout: seconds per request (None: the client's default).
        max_retries: how often the client retries 408/429/5xx and lost connections
            (None: the client's default, 2).
        options: further fields of the request body, sent with every call as the API names
            them (through the client's `extra_body`): `{"reasoning": {"effort": "low",
            "summary": "auto"}, "max_output_tokens": 2000}`.
        previous_response_id: keep the conversation on OpenAI's side (see above) instead of
            sending it whole.
        encrypted_reasoning: in the stateless mode, ask for the reasoning's encrypted content.
            Models without reasoning (gpt-4o, gpt-4.1) refuse it (HTTP 400, "Encrypted content
            is not supported with this model"): pass False for them.

    Raises:
        InvalidInput: a blank model, a flag that is not a bool, `client` together with a
            setting for building one, or no API key at all.
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
        previous_response_id: bool = False,
        encrypted_reasoning: bool = True,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput(f"model must be a model name, got {model!r}")
        for name, flag in (
            ("previous_response_id", previous_response_id),
            ("encrypted_reasoning", encrypted_reasoning),
        ):
            if not isinstance(flag, bool):
                raise InvalidInput(f"{name} must be True or False, got {flag!r}")
        given = client_settings(
            client, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        client, self._owns_client = openai_client(client, given)
        self.model = model
        self.client = client
        self.options: dict[str, Any] = dict(options or {})
        self.previous_response_id = previous_response_id
        self.encrypted_reasoning = encrypted_reasoning

    async def close(self) -> None:
        """Close the client when this model built it (a client you passed stays open)."""
        if self._owns_client:
            await self.client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _request(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolReference] | None,
        chained: bool,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model}
        if chained:
            start = chain_start(messages)
            if start.instructions is not None:
                request["instructions"] = start.instructions
            request["input"] = to_responses_input(start.messages)
            request["store"] = True
            if start.previous is not None:
                request["previous_response_id"] = start.previous
        else:
            request["input"] = to_responses_input(messages)
            request["store"] = False
            if self.encrypted_reasoning:
                request["include"] = ["reasoning.encrypted_content"]
        if tools:
            request["tools"] = responses_tools(tools)
        if self.options:
            request["extra_body"] = self.options
        return request

    def _read(self, body: object) -> ChatResponse:
        return response_from_responses(body, stored=self.previous_response_id)

    def _read_summary(self, body: object) -> ChatResponse:
        return whole_summary(response_from_responses(body))

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> ChatResponse:
        """The model's reply to `messages`, offered `tools`.

        Returns:
            The reply: the assistant message (its text, function calls, reasoning and other
            output items, in order; the usage as reported in its metadata), usage, model,
            stop reason (the response's `status`, or why it is incomplete:
            "max_output_tokens", "content_filter").

        Raises:
            InvalidInput: a part holds an attachment reference instead of its bytes.
            ModelError: the provider failed the call (see `ModelError`).
        """
        request = self._request(messages, tools, self.previous_response_id)
        return await call_model(
            PROVIDER, self.model, lambda: self.client.responses.create(**request), self._read
        )

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """The reply as it arrives: text deltas (`str`), then the `ChatResponse` last.

        Raises:
            InvalidInput: a part holds an attachment reference instead of its bytes.
            ModelError: the provider failed the call, before or while streaming (a
                `response.failed` or `error` event included).
        """
        request = self._request(messages, tools, self.previous_response_id)
        return stream_model(
            PROVIDER,
            self.model,
            lambda: self.client.responses.create(**request, stream=True),
            ResponsesStream(stored=self.previous_response_id),
        )

    async def complete(self, messages: Sequence[Message]) -> Message:
        """The reply's assistant message: `ChatModelSummarizer` calls this.

        A reply the model stopped at its token cap is refused rather than returned cut short
        (a summary cut mid-sentence loses what it leaves out): the summarizer then declines.
        The call is always stateless (a summary is no part of the conversation OpenAI keeps
        with `previous_response_id`): nothing is stored, and the message carries no response
        id.

        Raises:
            InvalidInput: a part holds an attachment reference instead of its bytes.
            ModelError: the provider failed the call, or the reply hit the token cap.
        """
        request = self._request(messages, None, False)
        response = await call_model(
            PROVIDER,
            self.model,
            lambda: self.client.responses.create(**request),
            self._read_summary,
        )
        return response.message
