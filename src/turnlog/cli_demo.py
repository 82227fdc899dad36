"""`turnlog demo`: a realistic conversation with tool calls, compacted four ways and printed.

The conversation is a ShareGPT transcript (read by the same code as `turnlog import`); each of
four sessions holds a copy, compacted once with a different window.
"""

from __future__ import annotations

import argparse
import shlex
import textwrap

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
    TokenCountTrigger,
    TurnCountTrigger,
    WindowCompactionStrategy,
)
from turnlog.events import Message, SessionEvent
from turnlog.importers import sharegpt_messages
from turnlog.service import SessionService
from turnlog.testing.fakes import ScriptedChatModel
from turnlog.text import message_text

__all__ = ["DEMO_SUMMARY", "cmd_demo", "demo_conversation"]

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


def cmd_demo(svc: SessionService, args: argparse.Namespace) -> int:
    """Store the demo conversation in four sessions, compact each once, print what happened.

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
        "appends a boundary that names the events the model sees from then on."
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
            for m in result.summary:
                print(textwrap.fill(visible(message_text(m)), width(), initial_indent="  ",
                                    subsequent_indent="    "))  # fmt: skip
            print()
        if result.unchanged:
            print("unchanged: nothing left the view")
        print_result(result, before, view_tokens(svc.view(session_id)))
    print("\n" + _next_steps(target))
    return 0


def _next_steps(target: argparse.Namespace) -> str:
    """Where the sessions are, and commands to try next on the same store."""
    if target.memory:
        return (
            f"The four sessions were in {target.name}, which keeps nothing once the command "
            "ends. Run the demo on a file to look at them afterwards:\n"
            "  turnlog --db /tmp/demo.db demo\n"
            "  turnlog --db /tmp/demo.db show demo-summary --log"
        )
    again = " ".join(shlex.quote(part) for part in target.again)
    turnlog = visible(f"turnlog {again}" if again else "turnlog")
    lines = [
        f"The four sessions are in {visible(target.name)}. Try next:",
        f"  {turnlog} sessions",
        f"  {turnlog} show demo-summary --log",
        f"  {turnlog} compact demo-last-turns --last-turns 1",
        f"  {turnlog} import FILE      (OpenAI chat messages as JSON or JSONL, or ShareGPT)",
    ]
    if target.hidden_password:
        lines.append("  (put your password back in the URL: it is not printed)")
    return "\n".join(lines)
