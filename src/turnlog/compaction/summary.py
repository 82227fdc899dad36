"""Summarizers: condense what leaves the view into a summary turn."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, cast

from msgspec.structs import replace

from turnlog.compaction._attachments import attachment_notes
from turnlog.compaction._budget import check_cap, counter_of, cut_to_fit, room_error, turn_tokens
from turnlog.compaction._checks import check_function, describe
from turnlog.compaction.base import SummaryRequest
from turnlog.compaction.files import (
    DEFAULT_FILE_OPERATIONS,
    FilesTouched,
    covered_files,
    files_metadata,
    files_section,
)
from turnlog.errors import InvalidInput
from turnlog.events import Message, SessionEvent
from turnlog.parts import ReasoningPart
from turnlog.reasoning import without_reasoning
from turnlog.text import event_text

__all__ = [
    "DEFAULT_SHADOW_PROMPT",
    "DEFAULT_SUMMARY_SYSTEM_PROMPT",
    "ChatFunction",
    "ChatModel",
    "ChatModelSummarizer",
    "FilesFunction",
]


def _warn(message: str, *args: object) -> None:
    """Log at WARNING on the `turnlog.compaction` logger (logging loads on the first warning)."""
    import logging

    logging.getLogger("turnlog.compaction").warning(message, *args)


DEFAULT_SUMMARY_SYSTEM_PROMPT = (
    "You keep the running memory of a conversation between a user and an AI assistant. "
    "Write a compact, factual record of the part of the conversation you are given, so the "
    "assistant can carry on without it. Keep: the user's goals and constraints, decisions made, "
    "facts and numbers learned (including what tools returned), open questions and promised next "
    "steps. Drop pleasantries and repetition. Write in the third person, in plain prose or short "
    "bullets, and never invent anything that is not in the text."
)

DEFAULT_SHADOW_PROMPT = "Remind me what we have covered so far in this conversation."


class ChatModel(Protocol):
    """The least a summarizer needs from a chat model: one completion.

    `complete` may be an `async def` (it then returns an awaitable), for `AsyncSessionService`.
    """

    def complete(self, messages: Sequence[Message]) -> Message | Awaitable[Message]:
        """The model's reply to `messages`."""
        ...


ChatFunction = Callable[[Sequence[Message]], Message | Awaitable[Message]]
"""A chat model as a plain function: the messages in, the reply out (or an async function)."""

FilesFunction = Callable[[Sequence[SessionEvent]], FilesTouched]
"""Finds the files that events read and modified: a `FileOperations`, or a function like it."""


def _completion(chat_model: object) -> ChatFunction:
    """The function that asks `chat_model` for a reply: its `complete` method, or itself.

    Raises:
        InvalidInput: `chat_model` is neither a `ChatModel` nor a function of the messages.
    """
    shape = "(messages) -> Message, or an object with complete(messages) -> Message"
    if isinstance(chat_model, type):
        check_function(chat_model, "chat_model", shape)  # raises: a class, not an instance
    complete = getattr(chat_model, "complete", None)
    if callable(complete):
        method = check_function(complete, "chat_model.complete", "(messages) -> Message")
        return cast(ChatFunction, method)
    return cast(ChatFunction, check_function(chat_model, "chat_model", shape))


def _is_async(fn: object) -> bool:
    """Whether calling `fn` starts a coroutine (an `async def` function, method or __call__)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )


class ChatModelSummarizer:
    """Asks a chat model for a rolling summary of what leaves the view.

    The prompt feeds the prior summary back (so each summary builds on the last), renders the
    covered events with `event_formatter`, and quotes the first `overlap_size` preserved events
    so the summary leads into what the model still sees. Stored system messages are never put in
    the prompt. The summary turn is a user shadow prompt followed by the assistant summary, so the
    view keeps alternating user and assistant.

    The attachments of the covered events (images, files, audio, a provider's blocks) are named
    in an "attachments" section, one line each: kind, media type, size, name, the start of its
    sha256 reference or its URL (the same notes `ExtractiveSummarizer` lists), so the summary
    can say they existed; their bytes are never in the prompt. Reasoning is left out: each event
    is given to `event_formatter` without its reasoning parts (an event of nothing but reasoning
    is not rendered), so neither a model's reasoning text nor its provider's signature or
    encrypted content reaches the summarizing model, which may be another provider's.

    The files that the covered tool calls read and modified (found by `file_operations`),
    merged with those recorded on the prior summary, are given to the model in a "files read /
    files modified" section, and recorded in the summary message's metadata under
    `"turnlog.files"` (`{"read": [...], "modified": [...]}`), so the next pass merges them back:
    the lists survive any number of compactions, whatever the model's text keeps.

    With `max_tokens`, the prompt asks for a summary that fits, and a reply over the cap is cut
    (at a line or word break, ending with a mark saying so) so that the summary turn, shadow
    prompt included, holds at most `max_tokens` tokens by the strategy's token counter. A cut is
    logged at WARNING.

    A blank reply is logged at WARNING, `on_failure` is called with the request, and the
    summarizer declines (nothing is written). When the model call raises, a WARNING is logged,
    `on_failure` is called, and the exception propagates out of `compact`; `InvalidInput` for a
    reply that is not a `Message` propagates too. Nothing is written in any of these cases.

    Every argument is checked here, when the summarizer is built, not at the first `compact`.

    Args:
        chat_model: anything with `complete(messages) -> Message` (a `ChatModel`), or a plain
            function `(messages) -> Message`.
        overlap_size: how many preserved events to quote for continuity (>= 0).
        system_prompt: the summarizing call's system prompt.
        shadow_prompt: the user message that opens the summary turn (not blank).
        event_formatter: a function `(SessionEvent) -> str`: how an event is rendered in the
            prompt.
        on_failure: None, or a function `(SummaryRequest) -> None`, called with the request
            when the model call raises or gives a blank reply.
        file_operations: finds the files the covered events read and modified: a
            `FileOperations` (the default one knows read_file, write_file, edit_file,
            apply_patch and the like), a function `(events) -> FilesTouched`, or None for no
            files section and no files metadata.
        max_tokens: None, or the most tokens the summary turn may hold (see above).

    Raises:
        InvalidInput: an argument of the wrong kind (`...`, a class instead of an instance, a
            function that cannot take one argument, a prompt that is not a string), a negative
            `overlap_size`, a blank `shadow_prompt`, a `max_tokens` that is not a positive
            integer or None.
    """

    def __init__(
        self,
        chat_model: ChatModel | ChatFunction,
        *,
        overlap_size: int = 2,
        system_prompt: str = DEFAULT_SUMMARY_SYSTEM_PROMPT,
        shadow_prompt: str = DEFAULT_SHADOW_PROMPT,
        event_formatter: Callable[[SessionEvent], str] = event_text,
        on_failure: Callable[[SummaryRequest], None] | None = None,
        file_operations: FilesFunction | None = DEFAULT_FILE_OPERATIONS,
        max_tokens: int | None = None,
    ) -> None:
        if isinstance(overlap_size, bool) or not isinstance(overlap_size, int) or overlap_size < 0:
            raise InvalidInput(f"overlap_size must be an integer >= 0, got {overlap_size!r}")
        for name, text in (("system_prompt", system_prompt), ("shadow_prompt", shadow_prompt)):
            if not isinstance(text, str):
                raise InvalidInput(f"{name} must be a string, got {describe(text)}")
        if not shadow_prompt.strip():
            raise InvalidInput("shadow_prompt must not be blank")
        self._complete = _completion(chat_model)
        self._async = _is_async(self._complete)
        check_function(event_formatter, "event_formatter", "(SessionEvent) -> str")
        if on_failure is not None:
            check_function(on_failure, "on_failure", "(SummaryRequest) -> None, or None")
        if file_operations is not None:
            check_function(file_operations, "file_operations", "(events) -> FilesTouched, or None")
        self.max_tokens = check_cap(max_tokens)
        self.file_operations = file_operations
        self.chat_model = chat_model
        self.overlap_size = overlap_size
        self.system_prompt = system_prompt
        self.shadow_prompt = shadow_prompt
        self.event_formatter = event_formatter
        self.on_failure = on_failure

    def files(self, request: SummaryRequest) -> FilesTouched:
        """The files of `request`: those its covered events read and modified, merged with those
        recorded on its prior summary; none without `file_operations`.

        Raises:
            InvalidInput: `file_operations` returned something else than a `FilesTouched`.
        """
        return covered_files(self.file_operations, request.covered, request.prior_summary)

    def prompt(self, request: SummaryRequest) -> list[Message]:
        """The messages sent to the model for `request`: the system prompt and one user message.

        Raises:
            InvalidInput: `file_operations` returned something else than a `FilesTouched`.
        """
        fmt = self.event_formatter
        parts: list[str] = []
        prior = [e for e in request.prior_summary if e.role == "assistant"]
        if prior:
            parts.append(
                "The summary so far:\n<summary>\n"
                + "\n".join(e.message.text or "" for e in prior if e.message is not None)
                + "\n</summary>"
            )
        covered = _shown(e for e in request.covered if e.role != "system")
        lead = "The conversation to add to it" if prior else "The conversation to summarize"
        parts.append(
            lead + ":\n<conversation>\n" + "\n".join(fmt(e) for e in covered) + "\n</conversation>"
        )
        attachments = _attachment_lines(covered)
        if attachments:
            parts.append(
                "The attachments of that conversation (their contents are not shown; name the "
                "ones that matter in the summary):\n<attachments>\n"
                + "\n".join(attachments)
                + "\n</attachments>"
            )
        overlap = _shown(e for e in request.preserved if e.role != "system")[: self.overlap_size]
        if overlap:
            parts.append(
                "For continuity only, the conversation goes on like this (do not summarize it):\n"
                "<continues>\n" + "\n".join(fmt(e) for e in overlap) + "\n</continues>"
            )
        files = self.files(request)
        if files:
            parts.append(
                "The files the conversation read and modified so far (keep them in the "
                "summary):\n<files>\n" + files_section(files) + "\n</files>"
            )
        ask = (
            "Write the updated summary, merging the summary so far with the new conversation."
            if prior
            else "Write the summary."
        )
        if self.max_tokens is not None:
            room = self.max_tokens - turn_tokens(counter_of(request), self.shadow_prompt, "")
            ask += f" Keep it under {max(room, 1)} tokens."
        parts.append(ask)
        return [Message.system(self.system_prompt), Message.user("\n\n".join(parts))]

    def __call__(self, request: SummaryRequest) -> list[Message] | Awaitable[list[Message]]:
        """The summary turn for `request`; `[]` declines.

        With an async chat model (`async def complete`, or an async function) this returns an
        awaitable, which `AsyncSessionService` awaits.
        """
        if self._async:
            return self._summary_async(request)  # the model is asked when this is awaited
        messages = self._prepare(request)
        try:
            reply = self._complete(messages)
        except Exception as exc:
            self._failed(request, exc)
            raise
        if inspect.isawaitable(reply):  # a plain function that returned an awaitable
            return self._summary_of(request, reply)
        return self._summary_turn(request, reply)

    async def _summary_async(self, request: SummaryRequest) -> list[Message]:
        messages = self._prepare(request)
        try:
            reply = await cast(Awaitable[Message], self._complete(messages))
        except Exception as exc:
            self._failed(request, exc)
            raise
        return self._summary_turn(request, reply)

    async def _summary_of(self, request: SummaryRequest, reply: Awaitable[object]) -> list[Message]:
        try:
            answer = await reply
        except Exception as exc:
            self._failed(request, exc)
            raise
        return self._summary_turn(request, answer)

    def _prepare(self, request: SummaryRequest) -> list[Message]:
        """The prompt for `request`, once the cap is known to hold a summary turn.

        Raises:
            InvalidInput: `max_tokens` cannot hold the shadow prompt (before the model is asked).
        """
        if self.max_tokens is not None:
            error = room_error(self.max_tokens, counter_of(request), self.shadow_prompt)
            if error is not None:
                raise error
        return self.prompt(request)

    def _failed(self, request: SummaryRequest, exc: Exception) -> None:
        """Log a failed model call at WARNING and tell `on_failure`."""
        status = getattr(exc, "status", None)  # its text may quote the prompt: never logged
        _warn(
            "session %s: the summarizing model call failed (%s%s); compaction skipped, the "
            "view is unchanged",
            request.session.id,
            type(exc).__qualname__,
            f" (HTTP {status})" if isinstance(status, int) else "",
        )
        if self.on_failure is not None:
            self.on_failure(request)

    def _summary_turn(self, request: SummaryRequest, reply: object) -> list[Message]:
        if not isinstance(reply, Message):
            raise InvalidInput(
                f"the summarizer's chat model returned {describe(reply)}, not a Message: "
                "return Message.assistant(text); nothing was written"
            )
        text = reply.text
        if text is None or not text.strip():
            _warn(
                "session %s: the summarizing model gave a blank reply; compaction skipped, "
                "the view is unchanged",
                request.session.id,
            )
            if self.on_failure is not None:
                self.on_failure(request)
            return []
        text = text.strip()
        if self.max_tokens is not None:
            counter = counter_of(request)
            fitted = cut_to_fit(counter, self.shadow_prompt, text, self.max_tokens)
            if fitted != text:
                _warn(
                    "session %s: the summary held %d tokens, over max_tokens=%d: it was cut",
                    request.session.id,
                    turn_tokens(counter, self.shadow_prompt, text),
                    self.max_tokens,
                )
                text = fitted
        summary = Message("assistant", text, metadata=files_metadata(self.files(request)))
        return [Message.user(self.shadow_prompt), summary]


def _shown(events: Iterable[SessionEvent]) -> list[SessionEvent]:
    """`events` as a summarizer prompt shows them: without their reasoning parts; an event of
    nothing but reasoning is left out."""
    out = []
    for event in events:
        m = event.message
        if m is None or not any(type(p) is ReasoningPart for p in m.parts):
            out.append(event)
            continue
        kept = without_reasoning(m)
        if kept is not m:
            out.append(replace(event, message=kept, tokens=None))
    return out


def _attachment_lines(events: Sequence[SessionEvent]) -> list[str]:
    """One line per attachment of `events`: who gave it, and its note."""
    lines = []
    for event in events:
        m = event.message
        if m is None:
            continue
        for tool, note in attachment_notes(m):
            whose = f"returned by {tool}" if tool is not None else f"from the {m.role}"
            lines.append(f"- {note} ({whose})")
    return lines
