# Generated from src/turnlog/models/anthropic_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""`AnthropicChatModel`: a chat model over the official `anthropic` package (Messages API).

Needs the `anthropic` extra: `pip install 'turnlog[anthropic]'`. The blocking twin,
`AnthropicChatModel` in turnlog/models/anthropic.py, is generated from this file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Self

import anthropic

from turnlog.errors import InvalidInput
from turnlog.events import Message
from turnlog.models.anthropic_format import (
    AnthropicStream,
    anthropic_tools,
    from_last_compaction,
    response_from_anthropic,
    to_anthropic_cached,
    to_anthropic_messages,
)
from turnlog.models.base import ChatResponse, StreamEvent, client_settings, whole_summary
from turnlog.models.calls import call_model, stream_model
from turnlog.toolsearch.base import ToolReference

__all__ = ["AnthropicChatModel"]

PROVIDER = "anthropic"


class AnthropicChatModel:
    """A chat model spoken to in the Anthropic Messages wire format.

    System messages go to the top-level `system` field; tool calls and results travel as
    tool_use / tool_result blocks (a failed result with `is_error`); consecutive messages of
    one role are merged into one turn. A message's parts go as content blocks in their order
    (images, documents; Anthropic's own reasoning and provider blocks exactly as received,
    never another provider's: see `turnlog.models.anthropic_parts`). Pass your own configured
    `anthropic.Anthropic` client, or let the model build one from `base_url` and
    `api_key` (the key falls back to ANTHROPIC_API_KEY, as in the client). The constructor
    does no I/O.

    Args:
        model: the model name sent with each request (for example "claude-sonnet-4-5").
        client: your client; then `base_url`, `api_key`, `timeout` and `max_retries` must not
            be given.
        base_url: the API's root (without /v1).
        api_key: the key; None reads ANTHROPIC_API_KEY.
        timeout: seconds per request (None: the client's default).
        max_retries: how often the client retries 408/429/5xx and lost connections
            (None: the client's default, 2).
        max_tokens: the reply's token limit, which the Messages API requires (>= 1).
        options: further fields of the request body, sent with every call as the API names
            them (through the client's `extra_body`, so any field the server knows works)
            (`{"temperature": 0.2}`). Extended thinking is turned on here:
            `{"thinking": {"type": "enabled", "budget_tokens": 8000}}` (or `{"type":
            "adaptive"}`); the reply's thinking blocks are then kept as `ReasoningPart`s and
            sent back, unmodified and in their order, as the API requires within a tool loop
            (interleaved thinking too). The API's own context management is turned on here
            too, `{"context_management": {"edits": [...]}}`, with its beta in `betas`.
        betas: beta features to turn on, sent as the `anthropic-beta` header of every request
            (`["interleaved-thinking-2025-05-14"]`, `["context-management-2025-06-27"]`,
            `["compact-2026-01-12"]`); empty sends no such header (a client of your own may
            send one of its own).
        cache_prompt: mark prompt-cache breakpoints (`cache_control: {"type": "ephemeral"}`)
            on the system prompt, at the end of the last message marked with
            `turnlog.models.CACHE_BREAKPOINT_KEY` (the pinned messages and the summary), and on
            the last block of the request: at most three of the API's four (see
            `turnlog.models.anthropic_format.to_anthropic_cached`). False sends no marker.

    Raises:
        InvalidInput: a blank model, `max_tokens` below 1, `cache_prompt` not a bool, a beta
            that is not a non-blank string, or `client` together with a setting for building
            one.
    """

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.Anthropic | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        max_tokens: int = 4096,
        options: Mapping[str, Any] | None = None,
        cache_prompt: bool = False,
        betas: Sequence[str] = (),
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput(f"model must be a model name, got {model!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInput(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        if not isinstance(cache_prompt, bool):
            raise InvalidInput(f"cache_prompt must be True or False, got {cache_prompt!r}")
        if isinstance(betas, str) or any(
            not isinstance(b, str) or not b.strip() or "," in b for b in betas
        ):
            raise InvalidInput(
                f"betas must be a list of beta names, got {betas!r}: for example "
                "betas=['interleaved-thinking-2025-05-14']"
            )
        given = client_settings(
            client, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        owned = client is None
        if client is None:
            try:
                client = anthropic.Anthropic(**given)
            except anthropic.AnthropicError as exc:
                raise InvalidInput(
                    f"cannot build an Anthropic client: {exc} (pass api_key=, set "
                    "ANTHROPIC_API_KEY, or pass client=)"
                ) from exc
        self._owns_client = owned
        self.model = model
        self.client = client
        self.max_tokens = max_tokens
        self.options: dict[str, Any] = dict(options or {})
        self.cache_prompt = cache_prompt
        self.betas: tuple[str, ...] = tuple(betas)

    def close(self) -> None:
        """Close the client when this model built it (a client you passed stays open)."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None
    ) -> dict[str, Any]:
        system: str | list[dict[str, Any]] | None
        if self.cache_prompt:
            system, turns = to_anthropic_cached(messages)
        else:
            system, turns = to_anthropic_messages(messages)
        request: dict[str, Any] = {
            "max_tokens": self.max_tokens,
            "model": self.model,
            "messages": from_last_compaction(turns),
        }
        if self.options:
            request["extra_body"] = self.options
        if self.betas:
            request["extra_headers"] = {"anthropic-beta": ",".join(self.betas)}
        if system is not None:
            request["system"] = system
        if tools:
            request["tools"] = anthropic_tools(tools)
        return request

    def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> ChatResponse:
        """The model's reply to `messages`, offered `tools`.

        Returns:
            The reply: the assistant message (its text blocks joined, its tool_use blocks as
            calls, its thinking and other blocks as parts, in order), usage, model, stop
            reason.

        Raises:
            ModelError: the provider failed the call (see `ModelError`).
        """
        request = self._request(messages, tools)
        return call_model(
            PROVIDER,
            self.model,
            lambda: self.client.messages.create(**request),
            response_from_anthropic,
        )

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> Iterator[StreamEvent]:
        """The reply as it arrives: text deltas (`str`), then the `ChatResponse` last.

        Raises:
            ModelError: the provider failed the call, before or while streaming (an `error`
                event of the stream included).
        """
        request = self._request(messages, tools)
        return stream_model(
            PROVIDER,
            self.model,
            lambda: self.client.messages.create(**request, stream=True),
            AnthropicStream(),
        )

    def complete(self, messages: Sequence[Message]) -> Message:
        """The reply's assistant message: `ChatModelSummarizer` calls this.

        A reply the model stopped at its token cap is refused rather than returned cut short
        (a summary cut mid-sentence loses what it leaves out): the summarizer then declines.

        Raises:
            ModelError: the provider failed the call, or the reply hit the token cap.
        """
        request = self._request(messages, None)
        response = call_model(
            PROVIDER,
            self.model,
            lambda: self.client.messages.create(**request),
            lambda body: whole_summary(response_from_anthropic(body)),
        )
        return response.message
