"""What a provider reported for a call, kept on the assistant event it answered with.

The turn runner (`turnlog.chat`) stores, under the event metadata key `USAGE_KEY`, the
provider's token counts for the call that produced an assistant message, the model's name, the
stop reason, and a digest of the prompt it sent (the ids of the events sent, in order). A
reported count is used only while the view still starts with exactly that prompt: after a
compaction, a new system prompt or a repaired view, the digest differs and the count is stale.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from turnlog.events import JsonValue, SessionEvent
from turnlog.lazy import LazyEvents

__all__ = ["USAGE_KEY", "Reported", "latest_report", "prompt_digest", "usage_metadata"]

USAGE_KEY: Final = "turnlog.usage"
"""The event metadata key under which the runner stores what the provider reported."""


def prompt_digest(events: Sequence[SessionEvent]) -> str:
    """A short digest of the events of a prompt: their ids, in order."""
    from hashlib import blake2b  # on first use: hashlib is not part of `import turnlog`

    digest = blake2b(digest_size=12)
    ids = events.ids if isinstance(events, LazyEvents) else [e.id for e in events]
    for event_id in ids:  # of a `LazyEvents`, from its outline: nothing is decoded
        digest.update(event_id.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def _count(value: int | None) -> JsonValue:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_metadata(
    *,
    input_tokens: int | None,
    output_tokens: int | None,
    cached_input_tokens: int | None,
    model: str,
    stop_reason: str | None,
    prompt: Sequence[SessionEvent],
    reasoning_tokens: int | None = None,
) -> dict[str, JsonValue]:
    """The metadata to store on the assistant event a call produced.

    Args:
        input_tokens: every prompt token the provider counted (cached ones included).
        output_tokens: the reply's tokens.
        cached_input_tokens: how many input tokens came from the provider's prompt cache.
        model: the model that answered.
        stop_reason: why it stopped, in the provider's words.
        prompt: the events whose messages were sent, in order.
        reasoning_tokens: how many output tokens went to reasoning; stored only when given.
    """
    entry: dict[str, JsonValue] = {
        "input_tokens": _count(input_tokens),
        "output_tokens": _count(output_tokens),
        "cached_input_tokens": _count(cached_input_tokens),
        "model": model,
        "stop_reason": stop_reason,
        "prompt": prompt_digest(prompt),
    }
    if _count(reasoning_tokens) is not None:
        entry["reasoning_tokens"] = reasoning_tokens
    return {USAGE_KEY: entry}


@dataclass(frozen=True, slots=True)
class Reported:
    """The newest usable report of a sent view."""

    index: int
    """The position, in the sent events, of the assistant event that carries it: the events
    before it are exactly the prompt the provider counted."""
    input_tokens: int
    """What the provider counted for that prompt (tool definitions and formatting included)."""


def _report(metadata: Mapping[str, JsonValue]) -> tuple[int, str] | None:
    entry = metadata.get(USAGE_KEY)
    if not isinstance(entry, dict):
        return None
    tokens, digest = entry.get("input_tokens"), entry.get("prompt")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return None
    if not isinstance(digest, str):
        return None
    return tokens, digest


def latest_report(sent: Sequence[SessionEvent]) -> Reported | None:
    """The newest provider report that still describes the start of `sent`.

    Walks back from the newest assistant event carrying a report; a report counts when the
    events before its assistant event are exactly the prompt it was made for (same ids, same
    order). Only the newest report is tried: an older one is never closer.

    Args:
        sent: the events sent to the model (`sent_events(view)`), in order.
    """
    roles = sent.roles if isinstance(sent, LazyEvents) else None  # no decoding to skip one
    for index in range(len(sent) - 1, -1, -1):
        if roles is not None and roles[index] != "assistant":
            continue
        event = sent[index]
        if event.role != "assistant":
            continue
        found = _report(event.metadata)
        if found is None:
            continue
        tokens, digest = found
        if prompt_digest(sent[:index]) != digest:
            return None
        return Reported(index, tokens)
    return None
