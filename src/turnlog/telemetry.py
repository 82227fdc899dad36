"""OpenTelemetry spans and metrics for turnlog, through `opentelemetry-api` only.

Nothing here is imported by `import turnlog`'s hot paths until first use, and everything is a
no-op when the API is not installed (`pip install 'turnlog[otel]'` installs it). With the API
installed but no SDK configured, a span costs a look at where the API keeps its global
providers and no attribute is computed: every attribute, and every token count, is computed
only for a span that records.

What is traced (see docs/observability.md for every attribute):

- `turnlog.append`: an append of one or more events (session id, events, the new version);
- `turnlog.view`: a view read (session id, events and messages in the view);
- `turnlog.compact`: a compaction pass (strategy, summarizer, events covered, tokens before,
  after and saved, conflict, whether it fired);
- `chat {model}`: a model call in the turn runner, with the GenAI semantic conventions
  (`gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
  `gen_ai.response.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`,
  `gen_ai.response.finish_reasons`).

Message content is never put on a span unless `capture_content(True)` is called or
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` is set; nor is an exception's text
(a provider's error can quote the prompt): without the opt-in, spans and turnlog's WARNING logs
carry its type and HTTP status only (`safe_error_text`).
"""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from turnlog.compaction import CompactionResult, CompactionStrategy
    from turnlog.events import Message, SessionEvent
    from turnlog.models.base import ChatResponse

__all__ = [
    "CONTENT_VARIABLE",
    "INSTRUMENTATION_NAME",
    "Span",
    "capture_content",
    "compaction_span",
    "configure",
    "idle",
    "model_span",
    "record_compaction",
    "record_response",
    "record_view",
    "safe_error_text",
    "safe_exc_info",
    "span",
]

INSTRUMENTATION_NAME: Final = "turnlog"
CONTENT_VARIABLE: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


class _State:
    """The tracer and instruments, resolved on first use (None: the API is not installed)."""

    loaded = False
    tracer: Any = None
    trace: Any = None
    context: Any = None
    status: Any = None
    client: Any = None
    compactions: Any = None
    conflicts: Any = None
    tokens_saved: Any = None
    view_size: Any = None
    token_usage: Any = None
    content: bool | None = None


# Whether anything records is read from two "holders": objects with a `_TRACER_PROVIDER` and a
# `_METER_PROVIDER` attribute, None while no provider is there. While turnlog uses the global
# providers they are the API's own modules (`opentelemetry.trace`, `opentelemetry.metrics.
# _internal`), where `set_tracer_provider` and `set_meter_provider` store the providers, so a
# provider set at any time, even after first use, is seen at the next call; without the API,
# stand-ins that hold None; with providers given to `configure`, stand-ins that hold them.
# Module globals, so that `idle()` is two global reads and two attribute reads.


def _holder(name: str, tracer_provider: Any = None, meter_provider: Any = None) -> Any:
    holder = types.ModuleType(f"turnlog.telemetry.{name}")  # read as fast as the API's modules
    setattr(holder, "_TRACER_PROVIDER", tracer_provider)  # noqa: B010
    setattr(holder, "_METER_PROVIDER", meter_provider)  # noqa: B010
    return holder


class _Unresolved(types.ModuleType):
    """The holders before first use: reading one resolves the API, then reads the real one.

    While nothing in the process has imported the API, no provider can have been set (setting
    one imports it), so nothing is resolved yet: turnlog does not import the API itself (20-50
    ms, paid by the first call of a new worker otherwise) until the application has.
    """

    @property
    def _TRACER_PROVIDER(self) -> Any:  # the API's name
        if _API not in sys.modules:
            return None
        _resolve()
        return _TRACES._TRACER_PROVIDER

    @property
    def _METER_PROVIDER(self) -> Any:  # the API's name
        if _API not in sys.modules:
            return None
        _resolve()
        return _METERS._METER_PROVIDER


def _resolve() -> None:
    _State.loaded = False  # the holders are set by loading: load (again, if they were not)
    _load()


_API: Final = "opentelemetry"
_UNRESOLVED: Final = _Unresolved("turnlog.telemetry.unresolved")
_ABSENT: Final = _holder("absent")  # the API is not installed: nothing is ever set
_TRACES: Any = _UNRESOLVED
_METERS: Any = _UNRESOLVED


def configure(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Send turnlog's spans and metrics to these providers instead of the global ones (set by
    `opentelemetry.trace.set_tracer_provider` and `opentelemetry.metrics.set_meter_provider`);
    `configure()` goes back to the global ones. Rarely needed: configuring the SDK globally is
    enough. Does nothing when the API is not installed.
    """
    _State.loaded = False
    _load(tracer_provider, meter_provider)


def _load(tracer_provider: Any = None, meter_provider: Any = None) -> Any:
    global _TRACES, _METERS
    if _State.loaded:
        return _State.tracer
    _State.loaded = True
    try:
        from opentelemetry import context, metrics, trace
        from opentelemetry.trace import Status, StatusCode
    except ImportError:
        _TRACES = _METERS = _ABSENT
        return None
    from turnlog import __version__

    _State.trace, _State.context = trace, context
    _State.client = trace.SpanKind.CLIENT
    # With the global provider, a span is skipped at once while none is set: the API's own
    # proxy tracer makes a no-op span then, and checking its global costs less than making it.
    # The same for metrics: while no meter provider is set globally, a point is not recorded
    # (the API's proxy instruments would drop it anyway, at a cost). A provider of one's own
    # (or an API without these globals) is always used.
    own = _holder("configured", True, True)
    _TRACES = trace if tracer_provider is None and hasattr(trace, "_TRACER_PROVIDER") else own
    internal = getattr(metrics, "_internal", None)
    global_metrics = meter_provider is None and hasattr(internal, "_METER_PROVIDER")
    _METERS = internal if global_metrics else own
    _State.status = (Status, StatusCode)
    _State.tracer = trace.get_tracer(
        INSTRUMENTATION_NAME, __version__, tracer_provider=tracer_provider
    )
    meter = metrics.get_meter(INSTRUMENTATION_NAME, __version__, meter_provider=meter_provider)
    _State.compactions = meter.create_counter(
        "turnlog.compactions", unit="{compaction}", description="Compaction passes, by outcome"
    )
    _State.conflicts = meter.create_counter(
        "turnlog.compaction.conflicts",
        unit="{conflict}",
        description="Compaction passes that lost the race to another writer",
    )
    _State.tokens_saved = meter.create_counter(
        "turnlog.compaction.tokens_saved",
        unit="{token}",
        description="Tokens the compactions took out of the view (the strategy's estimate)",
    )
    _State.view_size = meter.create_histogram(
        "turnlog.view.size", unit="{event}", description="Events in a view, at each view read"
    )
    _State.token_usage = meter.create_histogram(
        "gen_ai.client.token.usage", unit="{token}", description="Tokens used by model calls"
    )
    return _State.tracer


def capture_content(enabled: bool | None) -> None:
    """Put message content on model-call spans (`True`), never (`False`), or as
    `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` says (`None`, the default)."""
    _State.content = enabled


def _capturing() -> bool:
    if _State.content is not None:
        return _State.content
    return os.environ.get(CONTENT_VARIABLE, "").strip().lower() in ("1", "true", "yes")


class Span:
    """An open span, used as `with span("turnlog.append", session_id) as s: s.set(...)`.

    `span()` returns one shared, inert `Span` when nothing records (no SDK, or the API absent):
    entering it attaches nothing and `set` does nothing. `recording` says which, so that costly
    attributes are computed only when they are kept.
    """

    __slots__ = ("_current", "_span", "_token")

    def __init__(self, opened: Any, current: bool = True) -> None:
        self._span = opened
        self._token: Any = None
        self._current = current

    @property
    def recording(self) -> bool:
        """True when the span is kept: attributes set on it reach an exporter."""
        return self._span is not None

    def set(self, key: str, value: Any) -> None:
        """Set an attribute (a no-op on a span that does not record)."""
        if self._span is not None:
            self._span.set_attribute(key, value)

    def __enter__(self) -> Span:
        if self._span is not None and self._current:
            self._token = _State.context.attach(_State.trace.set_span_in_context(self._span))
        return self

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        opened = self._span
        if opened is None:
            return
        if error is not None and not isinstance(error, GeneratorExit):
            status, code = _State.status
            if _capturing():
                opened.record_exception(error)
            else:  # the text may quote the prompt: its type, status and frames only
                opened.add_event(
                    "exception",
                    {
                        "exception.type": type(error).__qualname__,
                        "exception.message": safe_error_text(error),
                        "exception.stacktrace": _frames(error),
                    },
                )
            opened.set_attribute("error.type", type(error).__qualname__)
            opened.set_status(status(code.ERROR, safe_error_text(error)[:200]))
        if self._token is not None:
            _State.context.detach(self._token)
        opened.end()


_INERT: Final = Span(None)


def safe_error_text(exc: BaseException) -> str:
    """What telemetry and logs may say about `exc`: its text when content capture is on
    (`capture_content`), else only its type and HTTP status (a provider's or summarizer's
    error text can quote the prompt), e.g. `ModelError (HTTP 400)`."""
    if _capturing():
        return f"{type(exc).__qualname__}: {exc}"
    status = getattr(exc, "status", None)
    if not isinstance(status, int) or isinstance(status, bool):
        status = getattr(exc, "status_code", None)
    shown = type(exc).__qualname__
    if isinstance(status, int) and not isinstance(status, bool):
        shown += f" (HTTP {status})"
    return shown


def safe_exc_info(exc: BaseException) -> BaseException | None:
    """`exc_info=` for a log record about `exc`: `exc` (its traceback, which ends with its
    text) when content capture is on, else None (the record says `safe_error_text` only)."""
    return exc if _capturing() else None


def _frames(exc: BaseException) -> str:
    """The traceback's frames (file, line, function, source line), without the message."""
    import traceback

    frames = "".join(traceback.format_tb(exc.__traceback__))
    return f"Traceback (most recent call last):\n{frames}{type(exc).__qualname__}"


def span(
    name: str, session_id: str | None = None, *, client: bool = False, current: bool = True
) -> Span:
    """A span named `name` (kind CLIENT when `client`), made the current span while it is
    entered unless `current` is False; the shared inert span when nothing records."""
    if _TRACES._TRACER_PROVIDER is None:  # the API absent, or no global provider set
        return _INERT
    tracer = _State.tracer
    opened = tracer.start_span(name, kind=_State.client) if client else tracer.start_span(name)
    if not opened.is_recording():
        return _INERT
    if session_id is not None:
        opened.set_attribute("turnlog.session.id", session_id)
    return Span(opened, current)


def _metering() -> bool:
    """False while no metric point would be kept: the API absent, or the global meter provider
    unset (points would be dropped)."""
    return _METERS._METER_PROVIDER is not None


def idle() -> bool:
    """True when no span would record and no metric point would be kept, so a hot path (a view
    read) can skip its hooks altogether: the API is absent, or its global providers are unset.

    A provider set globally later (`opentelemetry.trace.set_tracer_provider`, or the metrics
    one) is seen by the next call: this reads where the API keeps them."""
    return _TRACES._TRACER_PROVIDER is None and _METERS._METER_PROVIDER is None


def record_view(s: Span, view: Sequence[SessionEvent]) -> None:
    """A view read's attributes and the view-size metric (after `span()`, which loaded the API).

    On the path of every view read, so written for speed: `_metering()` and `Span.set` inlined.
    """
    if _METERS._METER_PROVIDER is not None:
        _State.view_size.record(len(view))
    if s._span is not None:
        s._span.set_attribute("turnlog.view.events", len(view))


def compaction_span(session_id: str, strategy: CompactionStrategy) -> Span:
    """A span for one compaction pass, with the strategy and summarizer named."""
    s = span("turnlog.compact", session_id)
    if s.recording:
        s.set(
            "turnlog.compaction.strategy", str(getattr(strategy, "name", type(strategy).__name__))
        )
        summarizer = getattr(strategy, "summarizer", None)
        if summarizer is not None:
            s.set("turnlog.compaction.summarizer", _describe(summarizer))
    return s


def _describe(value: object) -> str:
    """A summarizer's name: `ChatModelSummarizer(<model>)`, a function's name, or its type."""
    model = getattr(getattr(value, "chat_model", None), "model", None)
    if isinstance(model, str):
        return f"{type(value).__qualname__}({model})"
    name = getattr(value, "__qualname__", None)
    return name if isinstance(name, str) else type(value).__qualname__


def record_compaction(
    s: Span,
    strategy: CompactionStrategy,
    fired: bool,
    result: CompactionResult,
    view: Sequence[SessionEvent],
    counter: Callable[[Sequence[SessionEvent]], int],
) -> None:
    """A compaction pass's attributes and metrics.

    Args:
        s: its span.
        strategy: the strategy.
        fired: whether the trigger fired.
        result: what the pass decided (a conflict has `conflict` set).
        view: the view the pass started from.
        counter: tokens of the events a view sends; called only when the span records.
    """
    if not _State.loaded and _API in sys.modules:
        _load()
    outcome = "conflict" if result.conflict else "unchanged" if result.unchanged else "compacted"
    name = str(getattr(strategy, "name", type(strategy).__name__))
    if _State.compactions is not None and _metering():
        _State.compactions.add(1, {"turnlog.compaction.strategy": name, "outcome": outcome})
        if result.conflict:
            _State.conflicts.add(1, {"turnlog.compaction.strategy": name})
        elif not result.unchanged:
            _State.tokens_saved.add(
                result.tokens_estimated_saved, {"turnlog.compaction.strategy": name}
            )
    if not s.recording:
        return
    s.set("turnlog.compaction.fired", fired)
    s.set("turnlog.compaction.conflict", result.conflict)
    s.set("turnlog.compaction.outcome", outcome)
    s.set("turnlog.compaction.events_covered", len(result.covered_events))
    s.set("turnlog.compaction.tokens_saved", result.tokens_estimated_saved)
    if fired:
        before = counter(view)
        s.set("turnlog.compaction.tokens_before", before)
        after = counter(result.view) if result.view and not result.unchanged else before
        s.set("turnlog.compaction.tokens_after", after)
    if result.boundary is not None and not result.conflict:
        b = result.boundary
        s.set("turnlog.compaction.pinned", len(b.pinned_event_ids))
        s.set("turnlog.compaction.summary", len(b.summary_event_ids))
        s.set("turnlog.compaction.preserved", len(b.preserved_event_ids))


def model_span(model: object, session_id: str, messages: Sequence[Message]) -> Span:
    """A GenAI client span for one model call (`chat {model}`); not made the current span,
    since a streamed call yields to the caller while it is open."""
    requested = getattr(model, "model", None)
    requested = requested if isinstance(requested, str) else None
    s = span(f"chat {requested}" if requested else "chat", session_id, client=True, current=False)
    if s.recording:
        s.set("gen_ai.operation.name", "chat")
        provider = getattr(model, "provider", None)
        if isinstance(provider, str):
            s.set("gen_ai.provider.name", provider)
        if requested:
            s.set("gen_ai.request.model", requested)
        s.set("gen_ai.conversation.id", session_id)
        if _capturing():
            s.set("gen_ai.input.messages", _messages_json(messages))
    return s


def record_response(s: Span, model: object, response: ChatResponse) -> None:
    """A model call's response attributes and the token-usage metric."""
    if not _State.loaded and _API in sys.modules:
        _load()
    usage = response.usage
    provider = getattr(model, "provider", None)
    common = {"gen_ai.operation.name": "chat", "gen_ai.response.model": response.model}
    if isinstance(provider, str):
        common["gen_ai.provider.name"] = provider
    if _State.token_usage is not None and _metering():
        for kind, n in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            if n is not None:
                _State.token_usage.record(n, {**common, "gen_ai.token.type": kind})
    if not s.recording:
        return
    s.set("gen_ai.response.model", response.model)
    if usage.input_tokens is not None:
        s.set("gen_ai.usage.input_tokens", usage.input_tokens)
    if usage.output_tokens is not None:
        s.set("gen_ai.usage.output_tokens", usage.output_tokens)
    if usage.cached_input_tokens is not None:
        s.set("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens)
    if response.stop_reason is not None:
        s.set("gen_ai.response.finish_reasons", [response.stop_reason])
    if _capturing():
        s.set("gen_ai.output.messages", _messages_json([response.message]))


def _messages_json(messages: Sequence[Message]) -> str:
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        if m.text:
            parts.append({"type": "text", "content": m.text})
        for c in m.tool_calls:
            parts.append(
                {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
            )
        for r in m.tool_results:
            parts.append({"type": "tool_call_response", "id": r.call_id, "response": r.content})
        out.append({"role": m.role, "parts": parts})
    return json.dumps(out, ensure_ascii=False)
