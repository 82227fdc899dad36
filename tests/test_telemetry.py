"""OpenTelemetry: the spans and metrics turnlog emits, read back through the SDK's in-memory
exporter and metric reader; real SQLite files; and no trace of it without the API."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from test_cold_start import run_fresh
from turnlog import (
    AsyncSessionService,
    CompactionWindow,
    Message,
    SessionNotFound,
    SessionService,
    SqliteStore,
    WindowCompactionStrategy,
    telemetry,
)
from turnlog.chat import SessionChat
from turnlog.compaction import ChatModelSummarizer, SummaryRequest
from turnlog.models.base import Usage
from turnlog.stores.sqlite_async import AsyncSqliteStore
from turnlog.testing import ScriptedChatModel

SECRET = "the launch code is 0000"


@pytest.fixture
def otel():
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider, meter_provider)
    yield exporter, reader
    telemetry.configure()
    telemetry.capture_content(None)
    meter_provider.shutdown()
    tracer_provider.shutdown()


def spans(exporter, name):
    return [s for s in exporter.get_finished_spans() if s.name == name]


def metric_points(reader):
    out = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = list(m.data.data_points)
    return out


def chatty(svc, sid, turns):
    svc.create(sid)
    svc.append_message(sid, Message.system("be brief"))
    for i in range(turns):
        svc.append_message(sid, Message.user(f"question {i}: {SECRET} " + "word " * 40))
        svc.append_message(sid, Message.assistant(f"answer {i} " + "word " * 40))


def test_append_and_view_spans(otel, tmp_path):
    exporter, reader = otel
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        chatty(svc, "s1", 2)
        view = svc.view("s1")
        svc.view_messages("s1")
    appends = spans(exporter, "turnlog.append")
    assert len(appends) == 5
    assert [a.attributes["turnlog.session.version"] for a in appends] == [1, 2, 3, 4, 5]
    assert all(a.attributes["turnlog.session.id"] == "s1" for a in appends)
    assert all(a.attributes["turnlog.append.events"] == 1 for a in appends)
    views = spans(exporter, "turnlog.view")
    assert [v.attributes["turnlog.view.events"] for v in views] == [5, 5]
    assert views[1].attributes["turnlog.view.messages"] == 5
    assert all(s.kind == SpanKind.INTERNAL for s in appends + views)
    sizes = metric_points(reader)["turnlog.view.size"]
    assert sizes[0].count == 2 and sizes[0].sum == 2 * len(view)
    for s in exporter.get_finished_spans():  # no message content on a span
        assert SECRET not in json.dumps(dict(s.attributes))


def test_a_failed_call_is_an_error_span(otel, tmp_path):
    exporter, _ = otel
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc, pytest.raises(SessionNotFound):
        svc.append_message("nope", Message.user("hi"))
    (span,) = spans(exporter, "turnlog.append")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["error.type"] == "SessionNotFound"


def my_summary(request: SummaryRequest) -> list[Message]:
    return [Message.user("summary: the user asked questions"), Message.assistant("noted")]


SUMMARIZERS = {
    "none": (None, None),
    "function": (my_summary, "my_summary"),
    "model": (
        ChatModelSummarizer(ScriptedChatModel(["the user asked"], model="sum-1")),
        "ChatModelSummarizer(sum-1)",
    ),
}


def test_the_compaction_span_counts_the_view_as_sent_without_finished_turns_reasoning(
    otel, tmp_path
):
    from turnlog import ReasoningPart

    exporter, _ = otel
    thought = ReasoningPart("anthropic", "let me think about Oslo " * 200, signature="sig")
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        for sid, first in (
            ("with", Message.assistant(parts=[thought, "Oslo it is."])),
            ("without", Message.assistant("Oslo it is.")),
        ):
            svc.create(sid)
            for m in (
                Message.user("where?"),
                first,
                Message.user("and then?"),
                Message.assistant("Bergen."),
            ):
                svc.append_message(sid, m)
            svc.compact(sid, lambda r: True, strategy)
    with_reasoning, without = spans(exporter, "turnlog.compact")
    # the first turn's reasoning is not sent (the runner's default policy): not counted either
    assert (
        with_reasoning.attributes["turnlog.compaction.tokens_before"]
        == without.attributes["turnlog.compaction.tokens_before"]
    )


@pytest.mark.parametrize("kind", sorted(SUMMARIZERS))
def test_compaction_span_and_metrics(kind, otel, tmp_path):
    exporter, reader = otel
    summarizer, described = SUMMARIZERS[kind]
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1), summarizer=summarizer)
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        chatty(svc, "s1", 6)
        result = svc.compact("s1", lambda r: True, strategy)
        again = svc.compact("s1", lambda r: False, strategy)
    assert not result.unchanged and again.unchanged
    first, second = spans(exporter, "turnlog.compact")
    a = first.attributes
    assert a["turnlog.session.id"] == "s1"
    assert a["turnlog.compaction.strategy"] == strategy.name
    assert a["turnlog.compaction.fired"] is True and a["turnlog.compaction.conflict"] is False
    assert a["turnlog.compaction.outcome"] == "compacted"
    assert a["turnlog.compaction.events_covered"] == len(result.covered_events) > 0
    assert a["turnlog.compaction.tokens_saved"] == result.tokens_estimated_saved > 0
    assert a["turnlog.compaction.tokens_before"] > a["turnlog.compaction.tokens_after"] > 0
    assert a["turnlog.compaction.preserved"] == 2
    if summarizer is None:
        assert "turnlog.compaction.summarizer" not in a
    else:
        assert a["turnlog.compaction.summarizer"] == described
        assert a["turnlog.compaction.summary"] > 0
    assert second.attributes["turnlog.compaction.fired"] is False
    assert second.attributes["turnlog.compaction.outcome"] == "unchanged"
    points = metric_points(reader)
    outcomes = {p.attributes["outcome"]: p.value for p in points["turnlog.compactions"]}
    assert outcomes == {"compacted": 1, "unchanged": 1}
    assert points["turnlog.compaction.tokens_saved"][0].value == result.tokens_estimated_saved


def test_a_conflict_is_counted(otel, tmp_path):
    exporter, reader = otel
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        chatty(svc, "s1", 4)

        def racing(request):  # another writer appends while the pass runs
            svc.append_message("s1", Message.user("meanwhile"))
            return True

        result = svc.compact("s1", racing, WindowCompactionStrategy(CompactionWindow.last_turns(1)))
    assert result.conflict
    (span,) = spans(exporter, "turnlog.compact")
    assert span.attributes["turnlog.compaction.conflict"] is True
    points = metric_points(reader)
    assert points["turnlog.compaction.conflicts"][0].value == 1
    assert "turnlog.compaction.tokens_saved" not in points


def test_async_service_is_traced_the_same(otel, tmp_path):
    exporter, _ = otel

    async def main():
        async with AsyncSessionService(AsyncSqliteStore(tmp_path / "a.db")) as svc:
            await svc.create("a")
            await svc.append_message("a", Message.user("hi"))
            await svc.view("a")

    asyncio.run(main())
    assert [s.name for s in exporter.get_finished_spans()] == ["turnlog.append", "turnlog.view"]


def usage(messages, tools):
    return Usage(input_tokens=120, output_tokens=7)


@pytest.mark.parametrize("capture", [False, True])
def test_model_call_follows_the_genai_conventions(capture, otel, tmp_path):
    exporter, reader = otel
    telemetry.capture_content(capture)
    model = ScriptedChatModel(["the reply"], usage=usage, model="scripted-1")
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        chat = SessionChat(svc, model, system="be brief")
        chat.send("s1", SECRET)
        list(chat.stream("s1", "and again"))
    calls = spans(exporter, "chat scripted-1")
    assert len(calls) == 2
    for call in calls:
        a = call.attributes
        assert call.kind == SpanKind.CLIENT
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "scripted"
        assert a["gen_ai.request.model"] == "scripted-1"
        assert a["gen_ai.response.model"] == "scripted-1"
        assert a["gen_ai.usage.input_tokens"] == 120 and a["gen_ai.usage.output_tokens"] == 7
        assert a["gen_ai.conversation.id"] == "s1"
        assert ("gen_ai.input.messages" in a) is capture
        assert ("gen_ai.output.messages" in a) is capture
    text = json.dumps([dict(s.attributes) for s in exporter.get_finished_spans()])
    assert (SECRET in text) is capture
    if capture:
        sent = json.loads(calls[0].attributes["gen_ai.input.messages"])
        assert sent[-1] == {"role": "user", "parts": [{"type": "text", "content": SECRET}]}
    usage_points = metric_points(reader)["gen_ai.client.token.usage"]
    by_type = {p.attributes["gen_ai.token.type"]: p.sum for p in usage_points}
    assert by_type == {"input": 240, "output": 14}


def test_content_opt_in_by_environment(otel, tmp_path, monkeypatch):
    exporter, _ = otel
    monkeypatch.setenv(telemetry.CONTENT_VARIABLE, "true")
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        SessionChat(svc, ScriptedChatModel(["ok"])).send("s1", SECRET)
    (call,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert SECRET in call.attributes["gen_ai.input.messages"]


def test_without_the_api_everything_works_and_nothing_is_traced(tmp_path):
    out = run_fresh(
        """
        import sys

        class NoOtel:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(name)

        sys.meta_path.insert(0, NoOtel())
        from turnlog import (CompactionWindow, Message, SessionService, SqliteStore,
                             WindowCompactionStrategy, telemetry)

        with SessionService(SqliteStore("t.db")) as svc:
            svc.create("s")
            for i in range(4):
                svc.append_message("s", Message.user(f"q{i}"))
                svc.append_message("s", Message.assistant(f"a{i}"))
            r = svc.compact("s", lambda r: True,
                            WindowCompactionStrategy(CompactionWindow.last_turns(1)))
            print(len(svc.view("s")), r.unchanged, telemetry._State.tracer,
                  "opentelemetry" in sys.modules)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "False", "None", "False"]  # the last turn


def test_import_turnlog_does_not_import_opentelemetry(tmp_path):
    out = run_fresh(
        "import sys, turnlog\nprint(any(m.startswith('opentelemetry') for m in sys.modules))",
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_using_turnlog_imports_opentelemetry_only_once_the_application_has(tmp_path):
    # A worker's first append, view read and compaction do not pay for importing the API
    # (20-50 ms) while nothing in the process uses it; once the application imports it and
    # sets a provider, the next call records.
    out = run_fresh(
        """
        import sys
        from turnlog import (CompactionWindow, Message, SessionService, SqliteStore,
                             WindowCompactionStrategy)

        def otel():
            return any(m.startswith("opentelemetry") for m in sys.modules)

        with SessionService(SqliteStore("t.db"), record_tokens=False) as svc:
            svc.create("s")
            for n in range(4):
                svc.append_message("s", Message.user(f"question {n}"))
                svc.append_message("s", Message.assistant(f"answer {n}"))
            svc.view("s")
            strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1))
            assert not svc.compact("s", lambda r: True, strategy).unchanged
            print(otel())
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            svc.append_message("s", Message.user("traced now"))
        print([s.name for s in exporter.get_finished_spans()])
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["False", "['turnlog.append']"]


def test_a_global_sdk_set_after_first_use_is_picked_up(tmp_path):
    # The usual setup: the application sets the global providers, maybe after turnlog was
    # already used (spans skipped until then). A fresh process, since globals are set once.
    out = run_fresh(
        """
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from turnlog import Message, SessionService, SqliteStore

        with SessionService(SqliteStore("t.db")) as svc:
            svc.create("s")
            svc.append_message("s", Message.user("before"))
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            reader = InMemoryMetricReader()
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            with trace.get_tracer("app").start_as_current_span("handler") as parent:
                svc.append_message("s", Message.assistant("after"))
                svc.view("s")
        spans = exporter.get_finished_spans()
        print([s.name for s in spans])
        print(all(s.parent.span_id == parent.get_span_context().span_id
                  for s in spans if s.name.startswith("turnlog")))
        points = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        print([m.name for m in points])
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "['turnlog.append', 'turnlog.view', 'handler']",
        "True",
        "['turnlog.view.size']",
    ]


def test_providers_set_one_at_a_time_after_view_reads_are_seen(tmp_path):
    # A view read skips its hooks while nothing would record (telemetry.idle()); each global
    # provider set later, even one alone, must end that at the next read.
    out = run_fresh(
        """
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from turnlog import Message, SessionService, SqliteStore, telemetry

        def sizes(reader):
            data = reader.get_metrics_data()
            if data is None:
                return []
            return [p.sum for rm in data.resource_metrics for sm in rm.scope_metrics
                    for m in sm.metrics for p in m.data.data_points]

        with SessionService(SqliteStore("t.db")) as svc:
            svc.create("s")
            svc.append_message("s", Message.user("hello"))
            svc.view("s")
            print(telemetry.idle())
            reader = InMemoryMetricReader()
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            print(telemetry.idle())
            svc.view("s")
            svc.append_message("s", Message.assistant("hi"))
            svc.view("s")
            print(sizes(reader))
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            svc.view("s")
            print([s.name for s in exporter.get_finished_spans()], sizes(reader))
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "True",
        "False",
        "[3]",  # two reads recorded (1 + 2 events), none before the provider
        "['turnlog.view'] [5]",
    ]


def test_configured_providers_record_while_the_global_ones_are_unset(otel, tmp_path):
    exporter, reader = otel
    assert not telemetry.idle()
    with SessionService(SqliteStore(tmp_path / "t.db")) as svc:
        svc.create("s")
        svc.append_message("s", Message.user("hello"))
        svc.view("s")
    assert [s.name for s in exporter.get_finished_spans()] == ["turnlog.append", "turnlog.view"]
    assert [p.sum for p in metric_points(reader)["turnlog.view.size"]] == [1]
    telemetry.configure()  # back to the global ones: unset here (tests that set them run apart)
    assert telemetry.idle()


@pytest.mark.parametrize("capture", [False, True])
def test_provider_error_text_stays_off_spans_and_logs_without_the_opt_in(
    capture, otel, tmp_path, caplog
):
    """A real OpenAI wire-format server whose 400s quote the prompt, for a reply and for a
    summary: without the opt-in no span (event, stack trace, status) and no log record holds
    the text; with it, it is there."""
    pytest.importorskip("openai")
    from model_servers import ScriptedServer, openai_completion, openai_error
    from turnlog.errors import ModelError
    from turnlog.models import OpenAIChatModel

    exporter, _ = otel
    telemetry.capture_content(capture)
    quoted = openai_error(400, f"bad request: your message {SECRET!r} is not allowed")
    server = ScriptedServer()
    try:
        server.reply_json(quoted, status=400)  # session a: the reply's call
        server.reply_json(openai_completion("A1"))  # session b: two turns, then the summary
        server.reply_json(openai_completion("A2"))
        server.reply_json(quoted, status=400)
        with (
            OpenAIChatModel("m", base_url=server.url + "/v1", api_key="k", max_retries=0) as model,
            SessionService(SqliteStore(tmp_path / "t.db")) as svc,
            caplog.at_level("WARNING", logger="turnlog"),
        ):
            with pytest.raises(ModelError):
                SessionChat(svc, model).send("a", SECRET)
            strategy = WindowCompactionStrategy(
                CompactionWindow.last_turns(1), summarizer=ChatModelSummarizer(model)
            )
            chat = SessionChat(svc, model, trigger=lambda request: True, strategy=strategy)
            chat.send("b", SECRET)
            turn = chat.send("b", "and again")
    finally:
        server.close()
    assert isinstance(turn.compaction_error, ModelError)
    assert len(server.requests) == 4
    failed = [s for s in exporter.get_finished_spans() if s.status.status_code == StatusCode.ERROR]
    assert {s.name for s in failed} >= {"chat m", "turnlog.compact"}
    for s in failed:
        assert s.attributes["error.type"] == "ModelError"
        assert [e.name for e in s.events] == ["exception"]
        assert s.events[0].attributes["exception.type"].endswith("ModelError")
    dumped = json.dumps(
        [
            [s.status.description, dict(s.attributes), [dict(e.attributes) for e in s.events]]
            for s in failed
        ]
    )
    logged = caplog.text + json.dumps([str(r.exc_info) for r in caplog.records])
    assert caplog.records and "ModelError (HTTP 400)" in caplog.text
    assert (SECRET in dumped) is capture
    assert (SECRET in logged) is capture
    if not capture:
        assert failed[0].status.description == "ModelError (HTTP 400)"
        assert "Traceback" in failed[0].events[0].attributes["exception.stacktrace"]
