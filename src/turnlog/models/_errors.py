"""Provider failures as `ModelError`: one message per kind of failure, saying what to do.

Pure: it reads the provider exception's attributes (`status_code`, the class name), never
imports a provider package.
"""

from __future__ import annotations

from turnlog.errors import ModelError
from turnlog.models.base import CappedReply, DuplicateCallId, IncompleteReply

__all__ = ["model_error"]

_KEYS = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY (or GOOGLE_API_KEY)",
}
_CAPS = {
    "openai": "options={'max_completion_tokens': N} (or 'max_tokens', for servers that "
    "know only that)",
    "anthropic": "max_tokens=",
    "gemini": "options={'max_output_tokens': N}",
}
_CAPS_BY_REASON = {
    # the Responses API's incomplete reason: its cap is max_output_tokens, not Chat
    # Completions' max_completion_tokens, though both adapters are "openai"
    "max_output_tokens": "options={'max_output_tokens': N}",
}


def _detail(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def model_error(provider: str, model: str, exc: BaseException) -> ModelError:
    """The `ModelError` for `exc`, raised by `provider`'s client while calling `model`."""
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    kind = type(exc).__name__
    detail = _detail(exc)
    who = f"{provider} model {model!r}"
    if isinstance(exc, IncompleteReply):
        status = status or 200
        advice = (
            f"the reply of {who} ended before it was complete ({detail}): the server or a "
            "proxy closed the stream early, so none of it was used and no tool was run; try "
            "again, and check the proxy's timeouts when it keeps happening"
        )
    elif isinstance(exc, CappedReply):
        status = status or 200
        advice = (
            f"{who} hit the reply's token cap (stop reason {exc.reason!r}), which cut "
            f"{exc.what} short: {exc.outcome}; raise the cap "
            f"({_CAPS_BY_REASON.get(exc.reason) or _CAPS.get(provider, 'max_tokens')})"
        )
    elif isinstance(exc, DuplicateCallId):
        status = status or 200
        advice = (
            f"the reply of {who} gives two tool calls the same id {exc.call_id!r}, so their "
            "results could not be told apart: the reply was not used and no tool was run; try "
            "again, and check the server's tool-call support when it keeps happening"
        )
    elif isinstance(exc, ValueError) or kind == "APIResponseValidationError":
        # MalformedReply, a body that is not JSON, or one the client's models reject
        status = status or 200
        advice = (
            f"the reply of {who} is not in the {provider} wire format ({detail}): check that "
            "base_url points at a server that speaks it"
        )
    elif status in (401, 403):
        advice = (
            f"{who} refused the credentials (HTTP {status}): check the API key (api_key=, or "
            f"{_KEYS.get(provider, 'the API key variable')}) and its permissions"
        )
    elif status == 404:
        advice = (
            f"{who} was not found (HTTP 404): check the model name and that base_url ends "
            "where the API starts (for example http://localhost:11434/v1 for Ollama)"
        )
    elif status == 429:
        advice = (
            f"{who} is rate limited (HTTP 429) and the client's retries ran out: wait and try "
            "again, lower the request rate, or give the client more max_retries"
        )
    elif status is not None and status >= 500:
        advice = f"{who} failed on the provider's side (HTTP {status}): try again later ({detail})"
    elif status is not None:
        advice = f"{who} refused the request (HTTP {status}): {detail}"
    elif kind == "APITimeoutError" or kind.endswith("Timeout"):  # httpx's, mid-stream
        advice = (
            f"{who} did not answer in time (counting the client's retries, if it makes any): "
            "try again, or give the client a longer timeout"
        )
    elif kind in ("APIConnectionError", "RemoteProtocolError", "ReadError", "ConnectError"):
        advice = f"{who} cannot be reached ({detail}): check base_url and that the server is up"
    else:
        advice = f"the call to {who} failed: {kind}: {detail}"
    return ModelError(provider, status, advice + "; nothing was appended to the log")
