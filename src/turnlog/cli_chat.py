"""`turnlog chat`: talk to a chat model in a session, the reply streamed, compaction shown.

A thin shell over `SessionChat`: it builds the model from the options and the environment,
reads user messages (each line of stdin, or one `--message`), streams each reply to stdout and
prints a bracketed line for each tool call run, each compaction, how full the model's context
window is (for a model turnlog.models.windows lists) and, with `--usage`, the provider's counts.
The API key comes only from the environment, never from an option, so it
stays out of shell history and the process list.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from turnlog.chat import SessionChat
from turnlog.cli_render import unit, view_tokens, visible, width
from turnlog.compaction import (
    ChatModelSummarizer,
    CompactionRequest,
    CompactionResult,
    CompactionWindow,
    CompositeCompactionTrigger,
    TokenCountTrigger,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.compaction.base import NOT_SMALLER
from turnlog.context_usage import ContextUsage
from turnlog.errors import InvalidInput, ModelError, ToolRoundsExceeded
from turnlog.events import check_id
from turnlog.models.base import Usage
from turnlog.service import SessionService
from turnlog.turns import ChatTurn, ToolRun

if TYPE_CHECKING:
    from turnlog.models import AnthropicChatModel, OpenAIChatModel

__all__ = [
    "CHAT_DETAILS",
    "CHAT_EXAMPLE",
    "CHAT_SUMMARY",
    "ChatSettings",
    "add_chat_arguments",
    "api_key",
    "chat_settings",
    "cmd_chat",
    "context_line",
    "error_line",
    "provider_api",
]

CHAT_SUMMARY: Final = "chat with a model in a session: the reply streamed, compactions shown"
CHAT_EXAMPLE: Final = (
    "turnlog chat support-42 --base-url http://localhost:11434/v1 --model llama3.2\n"
    "  turnlog chat support-42 --provider anthropic --model claude-sonnet-4-5 "
    "--if-tokens 60000 --last-turns 6 --summarize\n"
    "  printf 'hi\\nand again\\n' | turnlog chat s1 --model gpt-4o-mini --usage"
)
CHAT_DETAILS: Final = (
    "Each line of stdin is one user message (a terminal gets a `> ` prompt); end with EOF "
    "(Ctrl-D). --message sends one message and exits. The session is created when it does not "
    "exist (and a SQLite file too). The API key is read from the environment only: "
    "$TURNLOG_API_KEY if set, else $OPENAI_API_KEY or $ANTHROPIC_API_KEY, which are sent only "
    "to the provider's own API: a server given by --base-url (or $OPENAI_BASE_URL, "
    "$ANTHROPIC_BASE_URL) gets $TURNLOG_API_KEY, or a placeholder when it is unset (Ollama and "
    "llama.cpp need no key). Compaction after "
    "each turn: a window (--last-turns, --last-events, --token-budget) compacts whenever the "
    "view outgrows it, or only when --if-tokens or --if-turns fires; --summarize has the same "
    "model summarize what leaves the view. A failed model call prints one error line and the "
    "chat goes on; the exit code is then 1."
)

PLACEHOLDER_KEY: Final = "no-key"
"""The key sent to a --base-url server when no key variable is set (local servers ignore it)."""

_KEY_VARIABLES: Final = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
_BASE_URL_VARIABLES: Final = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}
_PROVIDER_HOSTS: Final = {"openai": "api.openai.com", "anthropic": "api.anthropic.com"}


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `turnlog chat` (no API key option, by design)."""
    parser.add_argument("session", help="the session id (created when it does not exist)")
    parser.add_argument("--model", required=True, metavar="NAME", help="the model name")
    parser.add_argument(
        "--provider",
        choices=("openai", "anthropic"),
        default="openai",
        help="the wire format: OpenAI Chat Completions (also Ollama, vLLM, llama.cpp) or "
        "Anthropic Messages (default: openai)",
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="the API's root, e.g. http://localhost:11434/v1 for Ollama (default: the "
        "provider's, or $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL)",
    )
    parser.add_argument("--system", metavar="TEXT", help="the system prompt")
    parser.add_argument(
        "--message", metavar="TEXT", help="send this one message and exit (stdin is not read)"
    )
    parser.add_argument(
        "--max-tokens", type=int, metavar="N", help="the reply's token limit (anthropic: 4096)"
    )
    parser.add_argument("--usage", action="store_true", help="print the provider's token counts")
    parser.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="per request (default: the client's)"
    )
    parser.add_argument(
        "--retries",
        type=int,
        metavar="N",
        help="the client's retries of 408/429/5xx and lost connections (default: 2)",
    )
    window = parser.add_mutually_exclusive_group()
    window.add_argument("--last-events", type=int, metavar="N", help="keep the last N events")
    window.add_argument("--last-turns", type=int, metavar="N", help="keep the last N turns")
    window.add_argument("--token-budget", type=int, metavar="N", help="keep what fits N tokens")
    parser.add_argument("--if-turns", type=int, metavar="N", help="compact only if > N turns")
    parser.add_argument(
        "--if-tokens", type=int, metavar="N", help="compact only if the prompt is >= N tokens"
    )
    parser.add_argument(
        "--summarize",
        action="store_true",
        help="the model summarizes what leaves the view (needs a window)",
    )


@dataclass(frozen=True)
class ChatSettings:
    """What `turnlog chat` was asked for, checked before the store is opened."""

    api_key: str
    """The key for the client (from the environment, or the placeholder)."""
    window: CompactionWindow | None
    """The compaction window; None never compacts."""
    triggers: tuple[TurnCountTrigger | TokenCountTrigger, ...]
    """--if-tokens and --if-turns; empty: compact whenever the view outgrows the window."""


def api_key(provider: str, base_url: str | None) -> str:
    """The API key from the environment, sent only where it belongs.

    $TURNLOG_API_KEY is used whatever the server. The provider's own variable
    ($OPENAI_API_KEY, $ANTHROPIC_API_KEY) goes only to the provider's own API: with no base URL,
    or one on the provider's host over https (api.openai.com, api.anthropic.com). Any other
    server (from --base-url or $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL) never receives it.

    Args:
        provider: "openai" or "anthropic".
        base_url: the --base-url given, if any.

    Returns:
        The key; `PLACEHOLDER_KEY` when another server is named and $TURNLOG_API_KEY is not
        set (a local server needs none, and the clients want some key).

    Raises:
        InvalidInput: no key for the provider's own API, which needs one.
    """
    own = os.environ.get("TURNLOG_API_KEY", "").strip()
    if own:
        return own
    variable = _KEY_VARIABLES[provider]
    url = base_url or os.environ.get(_BASE_URL_VARIABLES[provider], "").strip()
    if url and not provider_api(provider, url):
        return PLACEHOLDER_KEY
    key = os.environ.get(variable, "").strip()
    if key:
        return key
    raise InvalidInput(
        f"no API key: set {variable} (or TURNLOG_API_KEY) in the environment; for a local "
        "server that needs none, pass --base-url (e.g. http://localhost:11434/v1 for Ollama)"
    )


def provider_api(provider: str, url: str) -> bool:
    """True when `url` is the provider's own API (https on its host), the one place
    $OPENAI_API_KEY or $ANTHROPIC_API_KEY is sent to."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme == "https" and host == _PROVIDER_HOSTS[provider]


def _positive(value: int | float | None, option: str) -> None:
    if value is not None and value <= 0:
        raise InvalidInput(f"{option} must be above 0, got {value}")


def chat_settings(args: argparse.Namespace) -> ChatSettings:
    """Check `turnlog chat`'s arguments and read the key, before anything is opened.

    Returns:
        The checked settings.

    Raises:
        InvalidInput: a bad session id, value or combination, a blank message or system
            prompt, or no API key (see `api_key`).
    """
    check_id(args.session, "the session id")
    for option, text in (("--message", args.message), ("--system", args.system)):
        if text is not None and not text.strip():
            raise InvalidInput(f"{option} needs some text, not a blank string")
    if args.base_url is not None and not args.base_url.strip():
        raise InvalidInput("--base-url needs a URL, not an empty string")
    for option in ("last_events", "last_turns", "token_budget", "if_turns", "if_tokens"):
        _positive(getattr(args, option), "--" + option.replace("_", "-"))
    _positive(args.max_tokens, "--max-tokens")
    _positive(args.timeout, "--timeout")
    if args.retries is not None and args.retries < 0:
        raise InvalidInput(f"--retries must be 0 or more, got {args.retries}")
    window: CompactionWindow | None = None
    if args.last_events is not None:
        window = CompactionWindow.last_events(args.last_events)
    elif args.last_turns is not None:
        window = CompactionWindow.last_turns(args.last_turns)
    elif args.token_budget is not None:
        window = CompactionWindow.token_budget(args.token_budget)
    triggers: list[TurnCountTrigger | TokenCountTrigger] = []
    if args.if_turns is not None:
        triggers.append(TurnCountTrigger(args.if_turns))
    if args.if_tokens is not None:
        triggers.append(TokenCountTrigger(args.if_tokens))
    if window is None and (triggers or args.summarize):
        given = "--summarize" if args.summarize else "--if-tokens/--if-turns"
        raise InvalidInput(
            f"{given} needs a window to keep: add --last-turns N, --last-events N or "
            "--token-budget N"
        )
    return ChatSettings(api_key(args.provider, args.base_url), window, tuple(triggers))


def error_line(message: str, kind: str = "error") -> None:
    """Print `turnlog: error: message` (or another `kind`) as one safe line on stderr."""
    print(f"turnlog: {kind}: {visible(' '.join(message.split()))}", file=sys.stderr)


class _Recorder:
    """The trigger the runner gets: asks the real one, and keeps the tokens of the view it saw."""

    def __init__(self, trigger: CompositeCompactionTrigger | None) -> None:
        self.trigger = trigger
        self.before = 0
        # True until the first ask of a turn: the service asks once more after a pass, on the
        # view it wrote, and that ask must not replace the tokens of the view before it
        self.fresh = True

    def __call__(self, request: CompactionRequest) -> bool:
        if self.fresh:
            self.before = view_tokens(request.view)
            self.fresh = False
        if self.trigger is None:
            return True  # a window alone: the strategy leaves a view that fits unchanged
        return self.trigger(request)


class _Printer:
    """Writes a turn to stdout as it happens; knows whether the cursor is at a line's start."""

    def __init__(self) -> None:
        self.fresh = True

    def text(self, delta: str) -> None:
        if delta:
            # not fresh before the write: a Ctrl-C (KeyboardInterrupt) that lands between the
            # write and the last line must still have the note start on a line of its own
            self.fresh = False
            sys.stdout.write(visible(delta, layout=True))
            sys.stdout.flush()
            self.fresh = delta.endswith("\n")

    def end_line(self) -> None:
        if not self.fresh:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.fresh = True

    def note(self, line: str) -> None:
        self.end_line()
        print(line, flush=True)


def _clip(text: str, room: int) -> str:
    flat = visible(" ".join(text.split()))
    return flat if len(flat) <= room else flat[: max(1, room - 1)] + "…"


def tool_line(run: ToolRun) -> str:
    """One line about a tool call run: the call, its arguments and the result, clipped."""
    call, result = run.call, run.result
    head = f"[tool {visible(call.name)}({_clip(call.arguments, 60)}) -> "
    shown = ("error: " if result.is_error else "") + result.content
    return head + _clip(shown, max(20, width() - len(head) - 1)) + "]"


def compaction_line(result: CompactionResult, before: int) -> str | None:
    """The line about the compaction after a turn, or None when nothing changed."""
    if result.conflict:
        return "[compaction skipped: another writer appended meanwhile; the next turn retries]"
    if result.unchanged:
        if not result.reason.startswith(NOT_SMALLER):  # the trigger did not fire, or it fits
            return None
        return f"[compaction: nothing written, {visible(result.reason)}]"
    after = view_tokens(result.view)
    summary = f", summary of {len(result.summary)} messages" if result.summary else ""
    count = len(result.covered_events)
    again = "; the trigger still fires, the next turn compacts again" if result.refires else ""
    return (
        f"[compacted: {count} event{'' if count == 1 else 's'} left the view{summary}; "
        f"{before:,} -> {after:,} {unit()}{again}]"
    )


def usage_line(usage: Usage) -> str:
    """The provider's counts for a turn (summed over its model calls); `?` where none came."""

    def shown(value: int | None) -> str:
        return "?" if value is None else f"{value:,}"

    cached = usage.cached_input_tokens
    extra = f" ({shown(cached)} cached)" if cached else ""
    reasoning = usage.reasoning_tokens
    thought = f" ({shown(reasoning)} reasoning)" if reasoning else ""
    return (
        f"[usage: {shown(usage.input_tokens)} input tokens{extra}, "
        f"{shown(usage.output_tokens)} output tokens{thought}]"
    )


def context_line(usage: ContextUsage) -> str | None:
    """How full the model's context window is after a turn; None when the window is unknown
    (a model turnlog.models.windows does not list)."""
    if usage.window is None or usage.share is None:
        return None
    return f"[context: {usage.tokens:,} / {usage.window:,} tokens ({usage.share:.0%})]"


def _messages(args: argparse.Namespace) -> Iterator[str]:
    """The user's messages: --message, else each non-blank line of stdin."""
    if args.message is not None:
        yield args.message
        return
    if sys.stdin.isatty():
        with contextlib.suppress(ImportError):  # line editing and history at the prompt
            import readline  # noqa: F401
        while True:
            try:
                line = input("> ")
            except EOFError:
                print()
                return
            except KeyboardInterrupt:  # Ctrl-C at the prompt ends the chat, on a new line
                print()
                raise
            if line.strip():
                yield line
        return
    try:
        for line in sys.stdin:
            if line.strip():
                yield line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"stdin is not UTF-8 text ({exc.reason})") from None


def _model(
    args: argparse.Namespace, settings: ChatSettings, *, capped: bool = True
) -> OpenAIChatModel | AnthropicChatModel:
    """The chat model the options ask for, with --max-tokens when `capped` (the replies'
    model; the summarizer's is not, so a summary is not cut at the reply's cap). Raises
    ImportError when its extra is missing."""
    max_tokens = args.max_tokens if capped else None
    if args.provider == "anthropic":
        from turnlog.models import AnthropicChatModel

        return AnthropicChatModel(
            args.model,
            base_url=args.base_url,
            api_key=settings.api_key,
            timeout=args.timeout,
            max_retries=args.retries,
            max_tokens=max_tokens or 4096,
        )
    from turnlog.models import OpenAIChatModel

    options = {}
    if max_tokens is not None:
        # OpenAI's own API wants the newer field; compatible servers all know the older one
        field = "max_tokens" if args.base_url else "max_completion_tokens"
        options[field] = max_tokens
    return OpenAIChatModel(
        args.model,
        base_url=args.base_url,
        api_key=settings.api_key,
        timeout=args.timeout,
        max_retries=args.retries,
        options=options,
    )


def _elsewhere(args: argparse.Namespace) -> bool:
    """True when the chat talks to a server other than the provider's own API."""
    url = args.base_url or os.environ.get(_BASE_URL_VARIABLES[args.provider], "").strip()
    return bool(url) and not provider_api(args.provider, url)


def _failure_text(exc: ModelError | ToolRoundsExceeded, args: argparse.Namespace) -> str:
    text = str(exc).replace("(api_key=, or ", "(TURNLOG_API_KEY or ")
    # the adapter's tail, or the runner's (which names request ids, meaningless here)
    for told in ("; nothing was appended to the log", "; this turn's user message stays stored"):
        head, found, _ = text.partition(told)
        if found:
            text = head + "; no reply was stored (your message stays in the log)"
            break
    if isinstance(exc, ModelError) and exc.status in (401, 403) and _elsewhere(args):
        text += (
            f"; this server gets only $TURNLOG_API_KEY: set TURNLOG_API_KEY to its key "
            f"(${_KEY_VARIABLES[args.provider]} is sent only to {_PROVIDER_HOSTS[args.provider]})"
        )
    return text


class _Warnings(logging.Handler):
    """Keeps the library's warnings during a turn (a summary cut short, ...), to print after
    it as one line each; when the compaction failed, the chat's own line says it instead."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.pending: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.pending.append(record.getMessage())

    def flush_lines(self, *, drop: bool) -> None:
        """Print what was kept (nothing when `drop`), and forget it."""
        if not drop:
            for message in self.pending:
                error_line(message, "warning")
        self.pending.clear()


def cmd_chat(svc: SessionService, args: argparse.Namespace) -> int:
    """Run `turnlog chat` on an open service (`args.chat` holds the checked `ChatSettings`).

    Returns:
        0, or 1 when a turn failed (its error was printed and the chat went on).
    """
    settings: ChatSettings = args.chat
    warnings = _Warnings()
    library = logging.getLogger("turnlog")
    library.addHandler(warnings)
    try:
        with contextlib.ExitStack() as models:
            model = _model(args, settings)
            models.enter_context(model)
            recorder = _Recorder(
                CompositeCompactionTrigger.any_of(*settings.triggers) if settings.triggers else None
            )
            strategy = None
            if settings.window is not None:
                summarizer = None
                if args.summarize:  # its own model: the reply's cap would cut the summary
                    own = model if args.max_tokens is None else _model(args, settings, capped=False)
                    if own is not model:
                        models.enter_context(own)
                    summarizer = ChatModelSummarizer(own)
                strategy = WindowCompactionStrategy(settings.window, summarizer=summarizer)
            chat = SessionChat(
                svc,
                model,
                system=args.system,
                trigger=recorder if strategy is not None else None,
                strategy=strategy,
            )
            failed = False
            for text in _messages(args):
                failed |= not _turn(chat, args, text, recorder, warnings)
            return 1 if failed else 0
    finally:
        library.removeHandler(warnings)


def _turn(
    chat: SessionChat,
    args: argparse.Namespace,
    text: str,
    recorder: _Recorder,
    warnings: _Warnings,
) -> bool:
    """One turn, printed as it happens; False when it failed (the error line printed)."""
    out = _Printer()
    warnings.pending.clear()
    recorder.fresh = True
    try:
        for event in chat.stream(args.session, text):
            if isinstance(event, str):
                out.text(event)
            elif isinstance(event, ToolRun):
                out.note(tool_line(event))
            elif isinstance(event, ChatTurn):
                out.end_line()
                _after(out, event, recorder, args.usage)
                context = context_line(chat.context_usage(args.session))
                if context is not None:
                    out.note(context)
                warnings.flush_lines(drop=event.compaction_error is not None)
    except KeyboardInterrupt:  # Ctrl-C during the reply: back to the prompt, not out
        out.end_line()
        warnings.flush_lines(drop=True)
        error_line(
            "reply interrupted (Ctrl-C): your message stays in the log and the next turn "
            "records it as unanswered; Ctrl-C at the prompt ends the chat",
            "note",
        )
        return True
    except (ModelError, ToolRoundsExceeded) as exc:
        out.end_line()
        warnings.flush_lines(drop=False)
        error_line(_failure_text(exc, args))
        return False
    return True


def _after(out: _Printer, turn: ChatTurn, recorder: _Recorder, usage: bool) -> None:
    if usage:
        out.note(usage_line(turn.usage))
    if turn.compaction is not None:
        line = compaction_line(turn.compaction, recorder.before)
        if line is not None:
            out.note(line)
    if turn.compaction_error is not None:
        exc = turn.compaction_error
        error_line(
            f"compaction after this turn failed, nothing of it was written and the reply "
            f"stands: {type(exc).__name__}: {exc}",
            "warning",
        )
