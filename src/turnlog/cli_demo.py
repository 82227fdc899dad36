"""`turnlog demo`: a realistic conversation with tool calls, compacted four ways and printed.

The conversation is a ShareGPT transcript (read by the same code as `turnlog import`); each of
four sessions holds a copy, compacted once with a different window. A fifth session follows the
story up through the turn runner (`SessionChat`): a scripted model calls real file tools on a
temporary folder, and the runner's compaction writes a summary that lists the files.
"""

from __future__ import annotations

import argparse
import json
import shlex
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from turnlog.chat import SessionChat
from turnlog.cli_render import (
    print_log,
    print_result,
    print_view,
    rows,
    view_tokens,
    visible,
    width,
)
from turnlog.compaction import (
    ChatModelSummarizer,
    CompactionTrigger,
    CompactionWindow,
    CompositeCompactionTrigger,
    ExtractiveSummarizer,
    TokenCountTrigger,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.compaction.files import FILES_METADATA_KEY
from turnlog.events import EventType, Message, SessionEvent, ToolCall
from turnlog.importers import sharegpt_messages
from turnlog.service import SessionService
from turnlog.testing.fakes import ScriptedChatModel
from turnlog.text import message_text

__all__ = ["DEMO_FILES", "DEMO_SUMMARY", "cmd_demo", "demo_conversation"]

_DEMO_SCRIPT = """
system        You are Ops Copilot, the on-call assistant of the Acme platform team. Inspect
              services with the tools before answering. Never roll back or restart anything
              without the user's go-ahead. Be brief.
human         Checkout is throwing 502s since about 14:10 UTC. Can you take a look?
function_call [{"name": "get_service_status", "arguments": {"service": "checkout-api"}},
               {"name": "list_deploys", "arguments": {"service": "checkout-api", "limit": 2}}]
observation   {"healthy_pods": 3, "pods": 8, "error_rate_5m": 0.21, "p99_ms": 4810}
observation   [{"version": "v2.31.0", "at": "14:06Z", "author": "mlopez",
                "change": "payment client: one shared connection pool"},
               {"version": "v2.30.2", "at": "Mar 10 09:12Z", "author": "jkim",
                "change": "bump dependencies"}]
gpt           checkout-api is degraded: 3 of 8 pods healthy, 21% errors, p99 4.8 s. v2.31.0
              shipped at 14:06, four minutes before the 502s, and it changed how the payment
              client holds connections. I'll check the error logs next.
human         Yes, look at the logs.
function_call {"name": "search_logs", "arguments": {"service": "checkout-api", "level": "error",
               "since": "14:00Z", "limit": 3}}
observation   14:09:58 ERROR payment-client: pool exhausted (max=10, waiting=57)
              | 14:10:02 ERROR upstream timeout after 3000ms POST /v1/charges
              | 14:10:02 WARN returning 502 to caller (payment step failed)
gpt           The errors come from the payment client's connection pool: 10 connections, 57
              requests waiting, then 3 s timeouts on POST /v1/charges, which surface as 502s.
human         Could it be PayLane's side though?
function_call {"name": "get_status_page", "arguments": {"provider": "paylane"}}
observation   {"provider": "paylane", "status": "operational", "incidents": []}
gpt           PayLane reports all systems operational and no incidents: the problem is ours.
human         What changed in the pool config with v2.31.0?
function_call {"name": "get_config_diff",
               "arguments": {"service": "checkout-api", "base": "v2.30.2", "head": "v2.31.0"}}
observation   {"payment.pool.max_size": [null, 10], "payment.pool.acquire_ms": [null, 3000]}
gpt           Before v2.31.0 every request opened its own payment client. v2.31.0 adds a shared
              pool capped at 10 connections, with a 3 s acquire timeout.
human         How much traffic are we taking right now?
function_call {"name": "get_metric", "arguments": {"service": "checkout-api",
               "metric": "requests_per_second", "window": "15m"}}
observation   {"avg": 1420, "max": 1630, "per_pod_avg": 178}
gpt           About 1,420 req/s (peak 1,630), ~178 per pod: far more than 10 connections serve.
human         Options?
gpt           1. Roll back to v2.30.2: about 3 minutes, restores per-request clients. 2. Raise
              payment.pool.max_size to 100 by config: no deploy, but untested at this load. I'd
              roll back now and size the pool properly in a follow-up.
human         Agreed, roll back.
function_call {"name": "rollback", "arguments": {"service": "checkout-api", "to": "v2.30.2",
               "reason": "payment pool exhausted, 502s"}}
observation   {"status": "started", "rollout": "ro-8841", "eta_s": 180}
gpt           Rollback ro-8841 to v2.30.2 started; it should take about 3 minutes.
human         Is it done? How does it look?
function_call [{"name": "get_rollout", "arguments": {"id": "ro-8841"}},
               {"name": "get_service_status", "arguments": {"service": "checkout-api"}}]
observation   {"status": "complete", "version": "v2.30.2"}
observation   {"healthy_pods": 8, "pods": 8, "error_rate_5m": 0.002, "p99_ms": 310}
gpt           Done: v2.30.2 runs on 8 of 8 healthy pods, errors are down to 0.2%, p99 310 ms.
human         Great. Draft a short incident note for #incidents.
gpt           Checkout 502s, 14:10-14:35 UTC. Cause: v2.31.0 (14:06) moved the payment client to
              a shared pool of 10 connections; at ~178 req/s per pod it ran dry and charges timed
              out after 3 s. Impact: ~21% of checkouts failed for 25 minutes. Fix: rolled back to
              v2.30.2 (ro-8841), recovered by 14:35. Follow-up: size the pool before re-shipping.
human         Open a ticket for the follow-up and give it to mlopez.
function_call {"name": "create_ticket", "arguments": {"title": "Size the payment pool before
               re-shipping v2.31", "owner": "mlopez", "priority": "P2"}}
observation   {"key": "OPS-1287", "owner": "mlopez", "priority": "P2"}
gpt           Opened OPS-1287 for mlopez (P2): size the payment pool before re-shipping v2.31.
"""


def demo_conversation() -> list[Message]:
    """An on-call engineer and an ops assistant chase checkout 502s: 10 turns, with tool calls.

    The script above is a ShareGPT conversation, one turn per unindented line (indented lines
    continue it), read by the same code as `turnlog import`.
    """
    turns: list[dict[str, str]] = []
    for line in _DEMO_SCRIPT.strip().splitlines():
        if line[:1].isspace():
            turns[-1]["value"] += " " + line.strip()
        else:
            who, _, value = line.partition(" ")
            turns.append({"from": who, "value": value.strip()})
    return sharegpt_messages("demo", {"conversations": turns})


DEMO_SUMMARY = (
    "The user, on call, reported HTTP 502s from checkout-api since ~14:10 UTC. Findings: 3 of 8 "
    "pods healthy, 21% errors, p99 4.8 s; release v2.31.0 (mlopez, 14:06) replaced per-request "
    "payment clients with a shared pool (max 10 connections, 3 s acquire timeout). Logs showed the "
    "pool exhausted (57 waiting) and 3 s timeouts on POST /v1/charges; PayLane was operational, "
    "so the cause is ours. Traffic is ~1,420 req/s, ~178 per pod. With the user's go-ahead the "
    "assistant rolled back to v2.30.2 (rollout ro-8841): 8/8 pods healthy, 0.2% errors, p99 310 ms."
)


def _demo_cases() -> list[tuple[str, WindowCompactionStrategy, CompactionTrigger, str]]:
    summarizer = ChatModelSummarizer(ScriptedChatModel([DEMO_SUMMARY]))
    return [
        ("demo-last-events", WindowCompactionStrategy(CompactionWindow.last_events(8)),
         lambda request: True,
         "keep the last 8 events. They would start inside turn 8 (at seq 30), so the cut moves "
         "forward to the next turn start: a turn is never split, and 6 events stay"),
        ("demo-last-turns", WindowCompactionStrategy(CompactionWindow.last_turns(3)),
         TurnCountTrigger(6), "keep the last 3 turns, once the view holds more than 6 turns"),
        ("demo-token-budget", WindowCompactionStrategy(CompactionWindow.token_budget(600)),
         TokenCountTrigger(1000),
         "keep the newest turns that fit 600 tokens (the system prompt's come off first), "
         "once the view reaches 1000 tokens"),
        ("demo-summary",
         WindowCompactionStrategy(CompactionWindow.last_turns(2), summarizer=summarizer),
         CompositeCompactionTrigger.any_of(TurnCountTrigger(8), TokenCountTrigger(4000)),
         "keep the last 2 turns and summarize the rest (a scripted model writes the summary), "
         "once the view holds more than 8 turns or 4000 tokens"),
    ]  # fmt: skip


FILES_SESSION = "demo-files"

DEMO_FILES: dict[str, str] = {
    "runbooks/payment-pool.md": (
        "# Sizing the payment client pool\n\n"
        "Every charge holds one connection for the whole PayLane call, so a pod needs as many\n"
        "connections as charges in flight at its busiest:\n\n"
        "    max_size = peak requests/s per pod x p99 charge time x 2 (headroom)\n\n"
        "rounded up to a multiple of 10. The p99 charge time at PayLane is 0.24 s (dashboard\n"
        "'paylane-latency', last 30 days). Leave acquire_ms at 3000: callers give up at 3.5 s.\n"
        "Load-test any change at peak traffic in staging before it ships.\n"
    ),
    "deploy/checkout-api.yaml": (
        "service: checkout-api\n"
        "image: registry.acme.internal/checkout-api:v2.31.0\n"
        "replicas: 8\n"
        "resources:\n"
        "  cpu: 1500m\n"
        "  memory: 2Gi\n"
        "http:\n"
        "  port: 8080\n"
        "  timeout_ms: 3500\n"
        "payment:\n"
        "  provider: paylane\n"
        "  endpoint: https://api.paylane.example/v1\n"
        "  pool:\n"
        "    max_size: 10\n"
        "    acquire_ms: 3000\n"
        "  retries: 0\n"
    ),
}
"""The files of the follow-up's temporary folder, which its `read_file` and `edit_file` see."""

_FOLLOW_UP_TURNS = (
    "Morning. I've picked up OPS-1287: size the payment pool in deploy/checkout-api.yaml the way "
    "the runbook says.",
    "Thanks. Anything else before we re-ship v2.31?",
)


def _call(n: int, name: str, **arguments: str) -> ToolCall:
    return ToolCall(f"call_{n}", name, json.dumps(arguments))


def _follow_up_model() -> ScriptedChatModel:
    """The scripted model of the follow-up: two reads at once, an edit, then two answers."""
    return ScriptedChatModel(
        [
            Message.assistant(
                tool_calls=[
                    _call(1, "read_file", path="runbooks/payment-pool.md"),
                    _call(2, "read_file", path="deploy/checkout-api.yaml"),
                ]
            ),
            Message.assistant(
                tool_calls=[
                    _call(
                        3,
                        "edit_file",
                        path="deploy/checkout-api.yaml",
                        old="max_size: 10",
                        new="max_size: 100",
                    )
                ]
            ),
            "Set payment.pool.max_size from 10 to 100 in deploy/checkout-api.yaml: the runbook's "
            "rule gives 204 req/s per pod at peak x 0.24 s x 2 = 98, rounded up to 100. "
            "acquire_ms stays at 3000.",
            "Yes: load-test v2.31.0 with the new pool at peak traffic (1,630 req/s) in staging, "
            "then re-ship it with OPS-1287 linked in the release notes.",
        ]
    )


def _file_tools(root: Path) -> list[Callable[..., str]]:
    """`read_file` and `edit_file` over the files under `root` (nothing outside it)."""

    def inside(path: str) -> Path:
        target = (root / path).resolve()
        if not target.is_relative_to(root.resolve()):
            raise ValueError(f"{path} is outside the repository")
        return target

    def read_file(path: str) -> str:
        """Read a text file of the deploy repository.

        Args:
            path: the file, relative to the repository's root.
        """
        return inside(path).read_text(encoding="utf-8")

    def edit_file(path: str, old: str, new: str) -> str:
        """Replace a piece of text that occurs once in a file of the deploy repository.

        Args:
            path: the file, relative to the repository's root.
            old: the text to replace; it must occur exactly once.
            new: the text to put in its place.
        """
        target = inside(path)
        text = target.read_text(encoding="utf-8")
        found = text.count(old)
        if found != 1:
            raise ValueError(f"{old!r} occurs {found} times in {path}, not once")
        target.write_text(text.replace(old, new, 1), encoding="utf-8")
        return f"edited {path}: 1 replacement"

    return [read_file, edit_file]


def _follow_up(svc: SessionService, system: str) -> None:
    """The fifth session: two turns through `SessionChat` with file tools, then a summary that
    lists the files read and modified. Prints the log and the summary turn."""
    session_id = FILES_SESSION
    summarizer = ExtractiveSummarizer()
    strategy = WindowCompactionStrategy(CompactionWindow.last_turns(1), summarizer=summarizer)
    svc.delete(session_id)
    svc.create(session_id, metadata={"demo": True, "strategy": strategy.name})
    print(f"\n=== {session_id}: {strategy.name} ===")
    note = (
        "The next morning the story goes on in a fifth session, run by the turn runner "
        "(turnlog.chat.SessionChat): a scripted model calls two real Python tools, read_file "
        "and edit_file, on a temporary folder. After each turn the runner compacts once the "
        "view holds more than 1 turn: it keeps the last turn and the ExtractiveSummarizer (no "
        "model) writes the summary, with the files the tool calls read and modified."
    )
    print(textwrap.fill(note, width()) + "\n")
    with tempfile.TemporaryDirectory(prefix="turnlog-demo-") as folder:
        root = Path(folder)
        for name, text in DEMO_FILES.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text, encoding="utf-8")
        chat = SessionChat(
            svc,
            _follow_up_model(),
            system=system,
            tools=_file_tools(root),
            trigger=TurnCountTrigger(1),
            strategy=strategy,
        )
        turns = [chat.send(session_id, text) for text in _FOLLOW_UP_TURNS]
        edited = (root / "deploy/checkout-api.yaml").read_text(encoding="utf-8")
    for n, turn in enumerate(turns, 1):
        ran = ", ".join(
            f"{r.call.name} {'error' if r.result.is_error else 'ok'}" for r in turn.tool_runs
        )
        compacted = turn.compaction is not None and not turn.compaction.unchanged
        print(
            f"turn {n}: {'ran ' + ran if ran else 'no tool calls'}; "
            + ("then the runner compacted" if compacted else "no compaction yet")
        )
    pool = next(line.strip() for line in edited.splitlines() if "max_size" in line)
    print(f"deploy/checkout-api.yaml in the temporary folder now says {visible(pool)!r}\n")
    print_log(svc, session_id, fold=True)
    print()
    if turns[-1].compaction_error is not None:  # the runner logs it and goes on; the demo stops
        raise turns[-1].compaction_error
    result = turns[-1].compaction
    assert result is not None  # the runner has a trigger, and its compaction did not fail
    summary = [e.message for e in result.summary_events if e.message is not None]
    print("the summary turn the ExtractiveSummarizer wrote, in full:")
    _print_messages(summary)
    recorded = {FILES_METADATA_KEY: summary[-1].metadata.get(FILES_METADATA_KEY)}
    print("\nits metadata keeps the files for the next pass, whatever the text keeps:")
    print("  " + visible(json.dumps(recorded, ensure_ascii=False)) + "\n")
    # the view before the runner compacted: every message before the (first) boundary
    log = svc.events(session_id)
    cut = next(e.seq or 0 for e in log if e.type == EventType.COMPACTION)
    before = view_tokens([e for e in log if e.message is not None and (e.seq or 0) < cut])
    print_result(result, before, view_tokens(svc.view(session_id)))


def _print_messages(messages: Sequence[Message]) -> None:
    """Print messages in full, each line of their text wrapped to the terminal."""
    for m in messages:
        for n, line in enumerate(visible(message_text(m), layout=True).splitlines()):
            first = "  " if n == 0 else "    "  # a message's later lines, and every wrapped
            rest = "    " if n == 0 else "      "  # line, indented under its first
            print(textwrap.fill(line, width(), initial_indent=first, subsequent_indent=rest))


def cmd_demo(svc: SessionService, args: argparse.Namespace) -> int:
    """Store the demo conversation in four sessions, compact each once, print what happened;
    then run the follow-up through `SessionChat` in a fifth session and print its summary turn.

    `args.target` is the store in use: its `name` is printed, its `again` option (e.g.
    `--db /tmp/demo.db`) is repeated in the commands suggested at the end.

    Returns:
        The exit code, 0.
    """
    target = args.target
    conversation = demo_conversation()
    turns = sum(1 for m in conversation if m.role == "user")
    calls = sum(len(m.tool_calls) for m in conversation)
    intro = (
        f"turnlog demo: an on-call engineer and an ops assistant chase checkout 502s "
        f"({len(conversation)} messages: a system prompt, {turns} turns, {calls} tool calls). "
        f"The conversation is stored in four sessions of {visible(target.name)}; each copy is "
        "compacted once with a different window. A compaction never changes the log: it "
        "appends a boundary that names the events the model sees from then on. A fifth "
        "session follows the story up with file tools, and its summary lists the files."
    )
    print(textwrap.fill(intro, width()))
    for n, (session_id, strategy, trigger, note) in enumerate(_demo_cases()):
        svc.delete(session_id)
        svc.create(session_id, metadata={"demo": True, "strategy": strategy.name})
        events = [SessionEvent.for_message(session_id, m) for m in conversation]
        svc.append_events(session_id, events, 0)
        if n == 0:
            print("\nThe conversation, as stored (seq is each event's place in the log):")
            print("\n".join("  " + line for line in rows(svc.events(session_id), {})))
        before = view_tokens(svc.view(session_id))
        result = svc.compact(session_id, trigger, strategy)
        print(f"\n=== {session_id}: {strategy.name} ===")
        print(textwrap.fill(note[0].upper() + note[1:] + ".", width()) + "\n")
        print_log(svc, session_id, fold=True)
        print()
        print_view(svc, session_id)
        print()
        if result.summary:
            print("the summary turn the scripted model wrote, in full:")
            _print_messages(result.summary)
            print()
        if result.unchanged:
            print("unchanged: nothing left the view")
        print_result(result, before, view_tokens(svc.view(session_id)))
    system = conversation[0].text
    assert system is not None  # the script starts with its system prompt
    _follow_up(svc, system)
    print("\n" + _next_steps(target))
    return 0


def _next_steps(target: argparse.Namespace) -> str:
    """Where the sessions are, and commands to try next on the same store."""
    if target.memory:
        return (
            f"The five sessions were in {target.name}, which keeps nothing once the command "
            "ends. Run the demo on a file to look at them afterwards:\n"
            "  turnlog --db /tmp/demo.db demo\n"
            "  turnlog --db /tmp/demo.db show demo-summary --log"
        )
    again = " ".join(shlex.quote(part) for part in target.again)
    turnlog = visible(f"turnlog {again}" if again else "turnlog")
    lines = [
        f"The five sessions are in {visible(target.name)}. Try next:",
        f"  {turnlog} sessions",
        f"  {turnlog} show demo-summary --log",
        f"  {turnlog} show {FILES_SESSION} --log --json",
        f"  {turnlog} compact demo-last-turns --last-turns 1",
        f'  {turnlog} search "pool size" --session demo-summary   (covered events too)',
        f"  {turnlog} import FILE      (OpenAI or Anthropic messages, JSON or JSONL; ShareGPT)",
    ]
    if target.hidden_password:
        lines.append("  (put your password back in the URL: it is not printed)")
    return "\n".join(lines)
