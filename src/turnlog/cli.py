"""The `turnlog` command: a thin shell over `SessionService` and a SQLite file.

Every command opens the service, calls its public methods and prints the result. Library errors
become one line on stderr (`turnlog: error: ...`) and a non-zero exit: 2 for bad usage or bad
input, 1 for everything else. Run `turnlog --help` for the commands.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from turnlog.compaction import (
    ChatModelSummarizer,
    CompactionBoundary,
    CompactionRequest,
    CompactionResult,
    CompactionTrigger,
    CompactionWindow,
    CompositeCompactionTrigger,
    TokenCountTrigger,
    TurnCountTrigger,
    WindowCompactionStrategy,
    sent_events,
)
from turnlog.errors import InvalidInput, SessionAlreadyExists, SessionNotFound, TurnlogError
from turnlog.events import EventType, Message, SessionEvent
from turnlog.importers import read_conversations, sharegpt_messages
from turnlog.rules import check_messages
from turnlog.service import SessionService
from turnlog.stores.base import EventFilter
from turnlog.stores.sqlite import SqliteStore
from turnlog.stores.url import open_store
from turnlog.testing.fakes import ScriptedChatModel
from turnlog.text import event_text, message_text
from turnlog.tokens import O200kCounter, default_counter, event_tokens

__all__ = ["main"]

Handler = Callable[[Any, argparse.Namespace], int]

# -- rendering ---------------------------------------------------------------------------------


def _width() -> int:
    return max(60, shutil.get_terminal_size((100, 24)).columns)


def _clip(text: str, room: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= room else flat[: max(1, room - 1)] + "…"


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _tokens(view: Sequence[SessionEvent]) -> int:
    return event_tokens().total(sent_events(view))


def _unit() -> str:
    return "o200k tokens" if isinstance(default_counter(), O200kCounter) else "tokens (est.)"


def _statuses(
    events: Sequence[SessionEvent],
    view: Sequence[SessionEvent],
    boundary: CompactionBoundary | None,
) -> dict[str, str]:
    """Each message event's place: pinned, summary, preserved, new, view, superseded, covered."""
    in_view = {e.id for e in view}
    sent = {e.id for e in sent_events(view)}
    parts: dict[str, str] = {}
    if boundary is not None:
        for name, ids in (
            ("pinned", boundary.pinned_event_ids),
            ("summary", boundary.summary_event_ids),
            ("preserved", boundary.preserved_event_ids),
        ):
            parts.update((i, name) for i in ids)
    out = {}
    for e in events:
        if e.message is None:
            continue
        if e.id not in in_view:
            out[e.id] = "covered"
        elif e.id not in sent:
            out[e.id] = "superseded"
        else:
            out[e.id] = parts.get(e.id, "new" if boundary else "view")
    return out


def _boundary_text(b: CompactionBoundary) -> str:
    return (
        f"{b.strategy}: pinned {len(b.pinned_event_ids)}, summary {len(b.summary_event_ids)}, "
        f"preserved {len(b.preserved_event_ids)}, covered {b.covered_event_count}; "
        f"~{b.tokens_estimated_saved:,} tokens saved"
    )


def _rows(
    events: Sequence[SessionEvent], statuses: dict[str, str], *, fold: bool = False
) -> list[str]:
    """One line per event: seq, status, role (or type), text. A boundary wraps onto two lines;
    with `fold`, a run of covered events is one line."""
    width = _width() - 2
    lines = [f"{'seq':>5}  {'status':<10} {'role':<9}  text"]
    at = 0
    while at < len(events):
        e = events[at]
        seq = f"{e.seq if e.seq is not None else '-':>5}"
        run = 1
        while fold and at + run < len(events) and statuses.get(events[at + run].id) == "covered":
            run += 1
        if fold and run > 2 and statuses.get(e.id) == "covered":
            span = f"{e.seq}-{events[at + run - 1].seq}"
            lines.append(f"{span:>5}  {'covered':<10} {'':<9}  {run} events, still in the log")
            at += run
            continue
        if e.type == EventType.COMPACTION:
            head = f"{seq}  {'BOUNDARY':<10} {'':<9}  "
            text = _boundary_text(CompactionBoundary.from_event(e))
            wrapped = textwrap.wrap(text, max(20, width - len(head)))
            lines += [(head if i == 0 else " " * len(head)) + w for i, w in enumerate(wrapped)]
        elif e.message is None:
            head = f"{seq}  {'-':<10} {e.type.name:<9}  "
            lines.append(head + _clip(json.dumps(e.payload, ensure_ascii=False), width - len(head)))
        else:
            head = f"{seq}  {statuses.get(e.id, ''):<10} {e.role or '':<9}  "
            lines.append(head + _clip(event_text(e), width - len(head)))
        at += 1
    return lines


def _event_json(e: SessionEvent, status: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq": e.seq,
        "id": e.id,
        "type": e.type.name,
        "status": status,
        "timestamp": None if e.timestamp is None else e.timestamp.isoformat(),
        "synthetic": e.synthetic,
        "text": event_text(e),
    }
    if e.message is None:
        out["payload"] = e.payload
        return out
    m = e.message
    out["message"] = {
        "role": m.role,
        "text": m.text,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
        ],
        "tool_results": [
            {"call_id": r.call_id, "name": r.name, "content": r.content} for r in m.tool_results
        ],
        "metadata": dict(m.metadata),
    }
    return out


def _newest_boundary(svc: SessionService, session_id: str) -> CompactionBoundary | None:
    """The boundary in force, reading only the session's COMPACTION events."""
    only = EventFilter(event_types=[EventType.COMPACTION])
    return CompactionBoundary.newest(svc.events(session_id, only))


def _print_log(svc: SessionService, session_id: str, *, fold: bool = False) -> None:
    log = svc.events(session_id)
    statuses = _statuses(log, svc.view(session_id), CompactionBoundary.newest(log))
    print(f"log of {session_id}: {len(log)} events; covered ones left the view, not the log")
    print("\n".join("  " + line for line in _rows(log, statuses, fold=fold)))


def _print_view(svc: SessionService, session_id: str) -> None:
    view = svc.view(session_id)
    statuses = _statuses(view, view, _newest_boundary(svc, session_id))
    sent = len(sent_events(view))
    print(f"view of {session_id}: {sent} messages sent to the model, {_tokens(view):,} {_unit()}")
    print("\n".join("  " + line for line in _rows(view, statuses)))


def _print_result(result: CompactionResult, before: int, after: int) -> None:
    if result.unchanged:
        return
    print(
        f"covered {len(result.covered_events)} events; pinned {len(result.pinned_events)}, "
        f"summary {len(result.summary_events)}, preserved {len(result.preserved_events)}"
    )
    print(
        f"{_unit()} sent: {before:,} before -> {after:,} after ({before - after:,} fewer)\n"
        f"the boundary estimates {result.tokens_estimated_saved:,} tokens saved"
    )


# -- the demo ----------------------------------------------------------------------------------


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


def _cmd_demo(svc: SessionService, args: argparse.Namespace) -> int:
    conversation = demo_conversation()
    turns = sum(1 for m in conversation if m.role == "user")
    calls = sum(len(m.tool_calls) for m in conversation)
    intro = (
        f"turnlog demo: an on-call engineer and an ops assistant chase checkout 502s "
        f"({len(conversation)} messages: a system prompt, {turns} turns, {calls} tool calls). "
        f"The conversation is stored in four sessions of {args.db}; each copy is compacted once "
        "with a different window. A compaction never changes the log: it appends a boundary "
        "that names the events the model sees from then on."
    )
    print(textwrap.fill(intro, _width()))
    for n, (session_id, strategy, trigger, note) in enumerate(_demo_cases()):
        svc.delete(session_id)
        svc.create(session_id, metadata={"demo": True, "strategy": strategy.name})
        events = [SessionEvent.for_message(session_id, m) for m in conversation]
        svc.append_events(session_id, events, 0)
        if n == 0:
            print("\nThe conversation, as stored (seq is each event's place in the log):")
            print("\n".join("  " + line for line in _rows(svc.events(session_id), {})))
        before = _tokens(svc.view(session_id))
        result = svc.compact(session_id, trigger, strategy)
        print(f"\n=== {session_id}: {strategy.name} ===")
        print(textwrap.fill(note[0].upper() + note[1:] + ".", _width()) + "\n")
        _print_log(svc, session_id, fold=True)
        print()
        _print_view(svc, session_id)
        print()
        if result.summary:
            print("the summary turn the scripted model wrote, in full:")
            for m in result.summary:
                print(textwrap.fill(message_text(m), _width(), initial_indent="  ",
                                    subsequent_indent="    "))  # fmt: skip
            print()
        if result.unchanged:
            print("unchanged: nothing left the view")
        _print_result(result, before, _tokens(svc.view(session_id)))
    print(
        f"\nThe four sessions are in {args.db}. Try next:\n"
        "  turnlog sessions\n"
        "  turnlog show demo-summary --log\n"
        "  turnlog compact demo-last-turns --last-turns 1\n"
        "  turnlog import FILE      (OpenAI chat messages as JSON or JSONL, or ShareGPT)"
    )
    return 0


# -- commands ----------------------------------------------------------------------------------


def _cmd_import(svc: SessionService, args: argparse.Namespace) -> int:
    path = Path(args.file)
    kind, conversations = args.conversations  # read before the database was opened
    base = args.session or path.stem
    ids = (
        [base]
        if len(conversations) == 1
        else [f"{base}-{i}" for i in range(1, len(conversations) + 1)]
    )
    check = not args.allow_broken
    for session_id, messages in zip(ids, conversations, strict=True):
        if check:  # the view rules, before anything is written
            try:
                check_messages(messages, "message")
            except InvalidInput as exc:
                raise InvalidInput(
                    f"{path}, conversation {session_id}: {exc}".replace(
                        "append with check_rules=False", "import with --allow-broken"
                    )
                ) from None
    for session_id in ids:  # check every id before writing anything
        if svc.find(session_id) is not None:
            raise SessionAlreadyExists(session_id)
    batches = [
        [SessionEvent.for_message(session_id, m) for m in messages]
        for session_id, messages in zip(ids, conversations, strict=True)
    ]
    created: list[str] = []
    try:
        for session_id, batch in zip(ids, batches, strict=True):
            svc.create(session_id, metadata={"imported_from": path.name, "format": kind})
            created.append(session_id)
            svc.append_events(session_id, batch, 0, check_rules=check)
    except BaseException:
        for session_id in created:  # all or nothing
            svc.delete(session_id)
        raise
    for session_id, batch in zip(ids, batches, strict=True):
        print(f"imported {len(batch)} events into session {session_id} ({kind})")
    return 0


def _cmd_sessions(svc: SessionService, args: argparse.Namespace) -> int:
    rows = []
    for s in svc.sessions():
        view = svc.view(s.id)
        rows.append((s, svc.version(s.id), len(sent_events(view)), _tokens(view)))
    if args.json:
        out = [
            {
                "id": s.id,
                "created_at": s.created_at.isoformat(),
                "expires_at": None if s.expires_at is None else s.expires_at.isoformat(),
                "version": version,
                "view_messages": size,
                "view_tokens": tokens,
                "metadata": dict(s.metadata),
            }
            for s, version, size, tokens in rows
        ]
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print(f"no sessions in {args.db}: try `turnlog demo` or `turnlog import FILE`")
        return 0
    wide = max(len("session"), *(len(r[0].id) for r in rows))
    print(
        f"{'session':<{wide}}  {'created (UTC)':<19}  {'expires (UTC)':<19}  events  view  tokens"
    )
    for s, version, size, tokens in rows:
        print(
            f"{s.id:<{wide}}  {_when(s.created_at):<19}  {_when(s.expires_at):<19}  "
            f"{version:>6}  {size:>4}  {tokens:>6}"
        )
    return 0


def _cmd_show(svc: SessionService, args: argparse.Namespace) -> int:
    svc.get(args.session)
    if args.json:
        view = svc.view(args.session)
        if args.log:
            shown = svc.events(args.session)
            statuses = _statuses(shown, view, CompactionBoundary.newest(shown))
        else:
            shown = view
            statuses = _statuses(view, view, _newest_boundary(svc, args.session))
        print(
            json.dumps(
                {
                    "session": args.session,
                    "version": svc.version(args.session),
                    "view_tokens": _tokens(view),
                    "log" if args.log else "view": [
                        _event_json(e, statuses.get(e.id, "-")) for e in shown
                    ],
                },
                indent=2,
                ensure_ascii=False,
            )
        )
    elif args.log:
        _print_log(svc, args.session)
    else:
        _print_view(svc, args.session)
    return 0


def _cmd_compact(svc: SessionService, args: argparse.Namespace) -> int:
    if args.last_events is not None:
        window = CompactionWindow.last_events(args.last_events)
    elif args.last_turns is not None:
        window = CompactionWindow.last_turns(args.last_turns)
    else:
        window = CompactionWindow.token_budget(args.token_budget)
    strategy = WindowCompactionStrategy(window)
    triggers: list[CompactionTrigger] = []
    if args.if_turns is not None:
        triggers.append(TurnCountTrigger(args.if_turns))
    if args.if_tokens is not None:
        triggers.append(TokenCountTrigger(args.if_tokens))
    trigger = CompositeCompactionTrigger.any_of(*triggers) if triggers else None
    fired: list[bool] = []

    def record(request: CompactionRequest) -> bool:
        fired.append(trigger is None or trigger(request))
        return fired[-1]

    before = _tokens(svc.view(args.session))
    result = svc.compact(args.session, record, strategy)
    if result.conflict:
        print(f"{args.session}: another writer appended meanwhile; nothing written, run it again")
        return 1
    if result.unchanged:
        why = "no trigger fired" if fired and not fired[-1] else f"the view fits {window}"
        print(f"{args.session}: unchanged ({why}); nothing written")
        return 0
    print(f"{args.session}: compacted with {strategy.name}")
    _print_result(result, before, _tokens(svc.view(args.session)))
    return 0


def _cmd_delete(svc: SessionService, args: argparse.Namespace) -> int:
    if not svc.delete(args.session):
        raise SessionNotFound(args.session)
    print(f"deleted session {args.session} and its log")
    return 0


def _cmd_expire(svc: SessionService, args: argparse.Namespace) -> int:
    count = svc.delete_expired()
    print(f"deleted {count} expired session{'' if count == 1 else 's'}")
    return 0


def _cmd_migrate(svc: SessionService | None, args: argparse.Namespace) -> int:
    url = args.store or f"sqlite:///{args.db}"
    if url.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        try:
            from turnlog.stores.postgres_schema import migrate
        except ImportError:
            return _fail("PostgreSQL needs an extra: pip install 'turnlog[postgres]'", 1)
        version = migrate(url)
        print(f"PostgreSQL schema is at version {version}")
        return 0
    store = open_store(url)  # opening creates or checks the schema
    kind = type(store).__name__
    store.close()
    print(f"{kind}: schema is current")
    return 0


# -- arguments and errors ----------------------------------------------------------------------

_COMMANDS: list[tuple[str, Handler, str, str]] = [
    ("demo", _cmd_demo, "build a conversation with tool calls, compact it four ways, print it",
     "turnlog demo\n  turnlog --db /tmp/demo.db demo"),
    ("import", _cmd_import, "import a conversation: OpenAI messages (JSON or JSONL) or ShareGPT",
     "turnlog import chat.json --session support-42\n  turnlog import dataset.jsonl"),
    ("sessions", _cmd_sessions, "list the sessions: created, expires, events, view size",
     "turnlog sessions\n  turnlog sessions --json"),
    ("show", _cmd_show, "print a session's view (default) or its whole log",
     "turnlog show demo-summary\n  turnlog show demo-summary --log"),
    ("compact", _cmd_compact, "compact a session with a window, optionally only if a trigger fires",
     "turnlog compact support-42 --last-turns 10 --if-tokens 8000"),
    ("delete", _cmd_delete, "delete a session and its whole log",
     "turnlog delete support-42"),
    ("expire", _cmd_expire, "delete every session whose expiry has passed",
     "turnlog expire"),
    ("migrate", _cmd_migrate, "create or upgrade a store's schema (PostgreSQL, SQLite)",
     "turnlog migrate --store postgresql://app@db.internal:5432/chat\n"
     "  turnlog migrate --store sqlite:///var/lib/app/turnlog.db"),
]  # fmt: skip

_DETAILS = {
    "import": 'A JSON list of OpenAI chat-completions messages (or {"messages": [...]}), JSONL '
    'with one message per line, or ShareGPT: a record {"conversations": [...]}, a list of '
    "records or JSONL of records. Consecutive tool messages become one turnlog tool message "
    "with several results. The session id is --session or the file's name without extension; "
    "several ShareGPT records become sessions ID-1, ID-2, ... Nothing is written if any entry "
    "is bad. A conversation that breaks the view rules (a tool result answering no open call, "
    "calls left unanswered, an empty assistant message, the assistant speaking first) is "
    "refused unless --allow-broken stores it as it is; the view sent to a model then repairs "
    "it, visibly.",
    "show": "--view (the default) lists what the model is sent. --log lists every event: "
    "covered ones left the view but stay in the log; BOUNDARY lines are compactions.",
    "compact": "One window is required. Without --if-turns or --if-tokens it always runs; with "
    "both it runs when either fires. Nothing is written when the view already fits.",
}


def _parser() -> argparse.ArgumentParser:
    default_db = os.environ.get("TURNLOG_DB") or "turnlog.db"
    parser = argparse.ArgumentParser(
        prog="turnlog",
        description="Conversation memory for LLM applications: inspect and compact the "
        "session logs in a turnlog SQLite file.",
        epilog="Example:\n  turnlog demo\n  turnlog show demo-summary --log",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--db", default=default_db, help=f"the SQLite file (default: $TURNLOG_DB or {default_db})"
    )
    parser.add_argument(
        "--store",
        default=os.environ.get("TURNLOG_STORE") or None,
        metavar="URL",
        help="a store URL instead of --db: sqlite:///path, postgresql://..., redis://..., "
        "redis+cluster://host:port,..., memory:// (default: $TURNLOG_STORE)",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, help="the SQLite file")
    common.add_argument("--store", default=argparse.SUPPRESS, metavar="URL", help="a store URL")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands = {}
    for name, handler, summary, example in _COMMANDS:
        p = sub.add_parser(
            name,
            parents=[common],
            help=summary,
            description=summary[0].upper() + summary[1:] + ". " + _DETAILS.get(name, ""),
            epilog=f"Example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(handler=handler)
        commands[name] = p
    commands["import"].add_argument("file", help="the JSON, JSONL or ShareGPT file")
    commands["import"].add_argument("--session", help="the new session's id")
    commands["import"].add_argument(
        "--allow-broken",
        action="store_true",
        help="store a conversation that breaks the view rules as it is (the view repairs it)",
    )
    for name in ("show", "compact", "delete"):
        commands[name].add_argument("session", help="the session id")
    for name in ("sessions", "show"):
        commands[name].add_argument("--json", action="store_true", help="print JSON")
    show = commands["show"].add_mutually_exclusive_group()
    show.add_argument("--view", action="store_true", help="what the model is sent (default)")
    show.add_argument("--log", action="store_true", help="every event, covered ones marked")
    compact = commands["compact"]
    window = compact.add_mutually_exclusive_group(required=True)
    window.add_argument("--last-events", type=int, metavar="N", help="keep the last N events")
    window.add_argument("--last-turns", type=int, metavar="N", help="keep the last N turns")
    window.add_argument("--token-budget", type=int, metavar="N", help="keep what fits N tokens")
    compact.add_argument("--if-turns", type=int, metavar="N", help="only if > N turns")
    compact.add_argument("--if-tokens", type=int, metavar="N", help="only if >= N tokens")
    return parser


def _fail(message: str, code: int) -> int:
    print(f"turnlog: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `turnlog` command with `argv` (default: `sys.argv[1:]`); returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        utf8 = stream.encoding.lower().replace("-", "") == "utf8"
        if isinstance(stream, io.TextIOWrapper) and not utf8:
            stream.reconfigure(errors="backslashreplace")
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else 2
    db = Path(args.db)
    where = args.store or str(db)
    try:
        if args.command == "import":  # a bad file must not even create the database
            args.conversations = read_conversations(Path(args.file))
        if args.command == "migrate":
            return _cmd_migrate(None, args)
        if args.store is None and args.command not in ("demo", "import") and not db.exists():
            return _fail(f"no turnlog database at {db}: run `turnlog demo` or pass --db PATH", 1)
        store = open_store(args.store) if args.store else SqliteStore(db)
        with SessionService(store) as svc:
            code: int = args.handler(svc, args)
            return code
    except SessionNotFound as exc:
        return _fail(
            f"session {exc.session_id!r} does not exist in {where} (see `turnlog sessions`)", 1
        )
    except SessionAlreadyExists as exc:
        return _fail(
            f"session {exc.session_id!r} already exists in {where}: pass --session NEW_ID, or "
            f"`turnlog delete {exc.session_id}` first",
            1,
        )
    except InvalidInput as exc:
        return _fail(str(exc), 2)
    except ImportError as exc:  # a store whose extra is not installed
        return _fail(str(exc), 1)
    except TurnlogError as exc:
        return _fail(str(exc), 1)
    except BrokenPipeError:  # e.g. `turnlog show x --log | head`
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        return _fail(f"{exc.filename or where}: {exc.strerror or exc}", 1)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as exc:
        if os.environ.get("TURNLOG_DEBUG"):
            raise
        return _fail(
            f"unexpected {type(exc).__name__}: {exc} (a bug in turnlog: please report it; "
            "TURNLOG_DEBUG=1 shows the traceback)",
            1,
        )


if __name__ == "__main__":
    sys.exit(main())
