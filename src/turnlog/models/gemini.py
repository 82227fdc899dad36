# Generated from src/turnlog/models/gemini_async.py by scripts/async_to_sync.py.
# Do not edit: change the async source, then run `python scripts/async_to_sync.py`.
"""`GeminiChatModel`: a chat model over the official `google-genai` package (Gemini API).

Needs the `gemini` extra: `pip install 'turnlog[gemini]'`. The blocking twin, `GeminiChatModel`
in turnlog/models/gemini.py, is generated from this file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Self

from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from turnlog.errors import InvalidInput
from turnlog.events import Message
from turnlog.models.base import ChatResponse, StreamEvent, client_settings
from turnlog.models.calls import call_model, stream_model
from turnlog.models.gemini_format import (
    GeminiStream,
    gemini_tools,
    response_from_gemini,
    to_gemini,
    whole_summary,
    wire_json,
)
from turnlog.toolsearch.base import ToolReference

__all__ = ["GeminiChatModel"]

PROVIDER = "gemini"


class GeminiStatus(Exception):
    """An error status of the Gemini API, with its HTTP status as `status_code` (what
    `turnlog.models._errors` reads)."""

    def __init__(self, exc: genai_errors.APIError) -> None:
        self.status_code = exc.code
        super().__init__(f"{exc.status or exc.code}: {exc.message or ''}".strip())


class _Events:
    """The client's stream of replies, as the wire format's JSON, closed on `close()`."""

    def __init__(self, replies: Iterator[genai_types.GenerateContentResponse]) -> None:
        self._replies = replies

    def __iter__(self) -> Iterator[object]:
        try:
            for reply in self._replies:
                yield wire_json(reply)
        except genai_errors.APIError as exc:
            raise GeminiStatus(exc) from exc

    def close(self) -> None:
        close = getattr(self._replies, "close", None)
        if close is not None:
            close()


class GeminiChatModel:
    """A chat model spoken to in the Gemini API's wire format (`generateContent`,
    `streamGenerateContent`).

    Each request sends the whole conversation. A thinking model's thought signatures (on its
    function calls, its text, its thought parts) are kept as `ReasoningPart("gemini", ...)` in
    the assistant message, in their place, and sent back on the same parts within the tool
    loop, as Gemini requires (it refuses a tool loop whose function call lost its signature);
    see `turnlog.models.gemini_format`.

    Pass your own configured `google.genai.Client` (a Vertex AI one too), or let the model build
    one from `api_key` and `base_url` (the key falls back to GEMINI_API_KEY or GOOGLE_API_KEY, as
    in the client). The constructor does no I/O.

    Args:
        model: the model name sent with each request (for example "gemini-2.5-flash").
        client: your client; then `base_url`, `api_key`, `timeout` and `max_retries` must not
            be given.
        base_url: the API's root, for example "https://generativelanguage.googleapis.com".
        api_key: the key; None reads GEMINI_API_KEY (or GOOGLE_API_KEY).
        timeout: seconds per request (None: the client's default).
        max_retries: how often the client retries 408/429/5xx and lost connections
            (None: 2).
        options: fields of the request's config, sent with every call as the client names them
            (`google.genai.types.GenerateContentConfig`): `{"thinking_config":
            {"include_thoughts": True}, "max_output_tokens": 2000, "temperature": 0}`.

    Raises:
        InvalidInput: a blank model, `client` together with a setting for building one, or no
            API key at all.
    """

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        client: genai.Client | None = None,
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
        owned = client is None
        if client is None:
            retries = given.get("max_retries", 2)
            http = genai_types.HttpOptions(
                base_url=given.get("base_url"),
                timeout=None if timeout is None else int(timeout * 1000),
                retry_options=genai_types.HttpRetryOptions(attempts=1 + retries),
            )
            try:
                client = genai.Client(api_key=given.get("api_key"), http_options=http)
            except ValueError as exc:
                raise InvalidInput(
                    f"cannot build a Gemini client: {exc} (pass api_key=, set "
                    "GEMINI_API_KEY, or pass client=)"
                ) from exc
        self._owns_client = owned
        self.model = model
        self.client = client
        self._api = client
        self.options: dict[str, Any] = dict(options or {})

    def close(self) -> None:
        """Close the client when this model built it (a client you passed stays open)."""
        if self._owns_client:
            self._api.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None
    ) -> dict[str, Any]:
        sent = to_gemini(messages)
        config: dict[str, Any] = dict(self.options)
        if sent.system_instruction is not None:
            config["system_instruction"] = sent.system_instruction
        if tools:
            config["tools"] = gemini_tools(tools)
        config["automatic_function_calling"] = {"disable": True}
        return {"model": self.model, "contents": sent.contents, "config": config}

    def _generate(self, request: dict[str, Any]) -> object:
        try:
            reply = self._api.models.generate_content(**request)
        except genai_errors.APIError as exc:
            raise GeminiStatus(exc) from exc
        return wire_json(reply)

    def _open_stream(self, request: dict[str, Any]) -> _Events:
        try:
            replies = self._api.models.generate_content_stream(**request)
        except genai_errors.APIError as exc:
            raise GeminiStatus(exc) from exc
        return _Events(replies)

    def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> ChatResponse:
        """The model's reply to `messages`, offered `tools`.

        Returns:
            The reply: the assistant message (its text, function calls, thoughts, signatures
            and other parts, in order; the usage as reported in its metadata), usage (output
            tokens counting the thoughts' tokens), model (the reply's `modelVersion`), stop
            reason (the candidate's `finishReason`: "STOP", "MAX_TOKENS", "SAFETY", ...).

        Raises:
            InvalidInput: a part holds an attachment reference instead of its bytes.
            ModelError: the provider failed the call (see `ModelError`).
        """
        request = self._request(messages, tools)
        return call_model(
            PROVIDER, self.model, lambda: self._generate(request), response_from_gemini
        )

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolReference] | None = None
    ) -> Iterator[StreamEvent]:
        """The reply as it arrives: text deltas (`str`), then the `ChatResponse` last.

        Raises:
            InvalidInput: a part holds an attachment reference instead of its bytes.
            ModelError: the provider failed the call, before or while streaming.
        """
        request = self._request(messages, tools)
        return stream_model(
            PROVIDER, self.model, lambda: self._open_stream(request), GeminiStream()
        )

    def complete(self, messages: Sequence[Message]) -> Message:
        """The reply's assistant message: `ChatModelSummarizer` calls this.

        A reply the model stopped at its token cap is refused rather than returned cut short
        (a summary cut mid-sentence loses what it leaves out): the summarizer then declines.

        Raises:
            InvalidInput: a part holds an attachment reference instead of its bytes.
            ModelError: the provider failed the call, or the reply hit the token cap.
        """
        request = self._request(messages, None)
        response = call_model(
            PROVIDER,
            self.model,
            lambda: self._generate(request),
            lambda body: whole_summary(response_from_gemini(body)),
        )
        return response.message
