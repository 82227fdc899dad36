"""Validity: what each framework's documented history trimming hands the model, against turnlog.

On BFCL's multi-turn tool-calling transcripts (bench/compare/_transcripts.py), in front of every
model request of every conversation, the history is trimmed the way each framework documents,
by that framework's own code, and the prompt the model would receive is converted to one common
form and judged by one oracle (`_transcripts.breaks`): a tool result with no call before it, a
call left unanswered, a first non-system message that is not the user's, an empty prompt, and a
prompt without the user's newest request. Counts are prompts, not faults.

- OpenAI Agents SDK: a real `SQLiteSession` (in memory) holds each finished turn; before a turn
  the history is `get_items(limit=N)` plus the new input (the documented `limit`), and, as the
  SDK's runner builds it, `prepare_input_with_session(..., SessionSettings(limit=N))` (SDK code
  that also drops calls and outputs the limit cut apart). Within a run, the run's own items follow.
- pydantic-ai: the documented `messages[-N:]` history processor over the run's whole message
  list before each request; as the processor returns it, as pydantic-ai then sends it (its own
  pre-request repair `_clean_message_history`, run after the processors), and with the repair its
  docs ask for (keep calls and returns paired: the kept slice starts at a user prompt).
- LangChain: `trim_messages` before each model call, with its defaults (`strategy="last"`, no
  `start_on`, `include_system=False`) and with the settings its docs recommend for chat models
  (`start_on="human"`, `end_on=("human", "tool")`, `include_system=True`), counting messages
  (`token_counter=len`) or tokens (`count_tokens_approximately`).
- turnlog: a real `SessionService` on the memory store; every message is appended, and before
  each request `service.compact(sid, <always>, WindowCompactionStrategy(window))` then
  `service.view_messages(sid)`, for `last_turns(N)`, `last_events(N)` and `token_budget(B)`.

N = 2..30; token budgets 200, 400, 800, 1,600. turnlog's target: 0 on every count.

    python bench/compare/validity.py [--quick] [--categories multi_turn_base,...]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sqlite3  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from importlib.metadata import version  # noqa: E402
from typing import Any  # noqa: E402

from _transcripts import (  # noqa: E402
    BFCL_VERSION,
    CATEGORIES,
    KINDS,
    Msg,
    Transcript,
    breaks,
    history_at,
    merge_assistant,
    requests,
    transcripts,
)

import turnlog  # noqa: E402
from turnlog import (  # noqa: E402
    CompactionWindow,
    MemoryStore,
    Message,
    SessionService,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.tokens import event_tokens  # noqa: E402

SIZES = tuple(range(2, 31))
BUDGETS = (200, 400, 800, 1600)

Tally = dict[str, dict[int, Counter[str]]]
"""setting -> N (or budget) -> kind -> prompts; the kind "requests" counts every prompt."""


def record(
    tally: Tally,
    setting: str,
    size: int,
    prompt: Sequence[Msg],
    newest: str,
    over_budget: bool = False,
) -> None:
    counter = tally[setting][size]
    counter["requests"] += 1
    counter["over budget"] += over_budget
    counter["messages"] += sum(1 for m in prompt if m.role != "system")
    found = breaks(prompt, newest)
    for kind in found:
        counter[kind] += 1
    if found:
        counter["any"] += 1


def user_uids(transcript: Transcript) -> dict[str, str]:
    """A user message's text -> its uid, to recognise it after a framework's conversion."""
    return {t.user.text: t.user.uid for t in transcript.turns}


# -- OpenAI Agents SDK ----------------------------------------------------------------------


def agents_items(messages: Sequence[Msg]) -> list[dict[str, Any]]:
    """Responses-API input items, as the SDK stores them in a session."""
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "user":
            items.append({"role": "user", "content": m.text})
        elif m.role == "assistant":
            if m.text:
                items.append(
                    {
                        "id": f"msg_{m.uid}",
                        "type": "message",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": m.text, "annotations": []}],
                    }
                )
            for c in m.calls:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": c.id,
                        "name": c.name,
                        "arguments": c.arguments,
                    }
                )
        elif m.role == "tool":
            items.append({"type": "function_call_output", "call_id": m.call_id, "output": m.text})
    return items


def from_agents(items: Sequence[Any], users: dict[str, str]) -> list[Msg]:
    from _transcripts import Call

    out: list[Msg] = []
    for item in items:
        item = dict(item)
        kind = item.get("type", "message")
        if kind == "function_call":
            call = Call(item["call_id"], item["name"], item.get("arguments", "{}"))
            out.append(Msg("assistant", "", (call,)))
        elif kind == "function_call_output":
            out.append(Msg("tool", str(item.get("output")), call_id=item["call_id"]))
        elif item.get("role") == "user":
            content = item["content"]
            text = content if isinstance(content, str) else content[0].get("text", "")
            out.append(Msg("user", text, uid=users.get(text, "")))
        elif item.get("role") == "assistant":
            text = " ".join(p.get("text", "") for p in item.get("content", []))
            out.append(Msg("assistant", text))
        elif item.get("role") in ("system", "developer"):
            out.append(Msg("system", str(item.get("content"))))
    return merge_assistant(out)


async def run_agents(corpus: Sequence[Transcript], tally: Tally) -> None:
    from agents import SessionSettings, SQLiteSession
    from agents.run_internal.session_persistence import prepare_input_with_session

    for transcript in corpus:
        users = user_uids(transcript)
        session = SQLiteSession(transcript.id)  # ":memory:", the SDK's default
        system = [transcript.system]  # the agent's instructions: sent apart, never stored
        for turn in transcript.turns:
            new = {"role": "user", "content": turn.user.text}
            run_items = agents_items([turn.calls] if turn.calls else []) + agents_items(
                turn.results
            )
            for n in SIZES:
                raw = [*await session.get_items(limit=n), new]
                prepared, _ = await prepare_input_with_session(
                    turn.user.text, session, None, SessionSettings(limit=n)
                )
                assert isinstance(prepared, list)
                stages = [[]] + ([run_items] if turn.calls else [])
                for extra in stages:
                    for setting, base in (
                        ("Agents SDK get_items(limit=N) + input", raw),
                        ("Agents SDK Runner input (limit=N)", prepared),
                    ):
                        prompt = system + from_agents([*base, *extra], users)
                        record(tally, setting, n, prompt, turn.user.uid)
            done = [turn.user, *([turn.calls] if turn.calls else []), *turn.results, turn.answer]
            await session.add_items(agents_items(done))  # type: ignore[arg-type]
        session.close()


# -- pydantic-ai ----------------------------------------------------------------------------


def pydantic_messages(messages: Sequence[Msg]) -> list[Any]:
    """ModelMessages as an agent run with `instructions=` builds them (no system part)."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    out: list[Any] = []
    for m in messages:
        if m.role == "user":
            out.append(ModelRequest(parts=[UserPromptPart(m.text)]))
        elif m.role == "assistant":
            parts: list[Any] = [TextPart(m.text)] if m.text else []
            parts += [ToolCallPart(c.name, c.arguments, c.id) for c in m.calls]
            out.append(ModelResponse(parts=parts))
        elif m.role == "tool":
            part = ToolReturnPart(m.name, m.text, str(m.call_id))
            last = out[-1] if out else None
            if isinstance(last, ModelRequest) and isinstance(last.parts[-1], ToolReturnPart):
                last.parts = [*last.parts, part]
            else:
                out.append(ModelRequest(parts=[part]))
    return out


def from_pydantic(messages: Sequence[Any], users: dict[str, str]) -> list[Msg]:
    from _transcripts import Call
    from pydantic_ai.messages import (
        ModelRequest,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    out: list[Msg] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            # tool returns first, then the user's text: how the chat adapters send a request
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    out.append(Msg("tool", str(part.content), call_id=part.tool_call_id))
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    text = str(part.content)
                    out.append(Msg("user", text, uid=users.get(text, "")))
        else:
            text = " ".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = tuple(
                Call(p.tool_call_id, p.tool_name, p.args_as_json_str())
                for p in message.parts
                if isinstance(p, ToolCallPart)
            )
            out.append(Msg("assistant", text, calls))
    return out


def keep_recent(n: int) -> Callable[[list[Any]], list[Any]]:
    """The processor pydantic-ai's docs show: keep the last `n` messages."""

    def processor(messages: list[Any]) -> list[Any]:
        return messages[-n:] if len(messages) > n else messages

    return processor


def paired(messages: list[Any]) -> list[Any]:
    """The repair pydantic-ai's docs ask for after slicing (calls and returns kept paired):
    the kept messages start at a request carrying a user prompt."""
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    for i, message in enumerate(messages):
        if isinstance(message, ModelRequest) and any(
            isinstance(p, UserPromptPart) for p in message.parts
        ):
            return messages[i:]
    return []


def run_pydantic(corpus: Sequence[Transcript], tally: Tally) -> None:
    from pydantic_ai.messages import _clean_message_history

    for transcript in corpus:
        users = user_uids(transcript)
        system = [transcript.system]  # `instructions=`: sent with every request, never trimmed
        for request in requests(transcript):
            history = pydantic_messages(history_at(transcript, request)[1:])
            newest = transcript.turns[request.turn].user.uid
            for n in SIZES:
                kept = keep_recent(n)(list(history))
                repaired = paired(kept)
                for setting, prompt in (
                    ("pydantic-ai messages[-N:] (processor output)", kept),
                    (
                        "pydantic-ai messages[-N:] as sent (built-in clean)",
                        _clean_message_history(list(kept), repair_last_response=True),
                    ),
                    (
                        "pydantic-ai messages[-N:] + docs' pairing repair",
                        _clean_message_history(list(repaired), repair_last_response=True),
                    ),
                ):
                    record(tally, setting, n, system + from_pydantic(prompt, users), newest)


# -- LangChain ------------------------------------------------------------------------------


def langchain_messages(messages: Sequence[Msg]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for m in messages:
        if m.role == "system":
            out.append(SystemMessage(m.text))
        elif m.role == "user":
            out.append(HumanMessage(m.text))
        elif m.role == "assistant":
            calls = [
                {"name": c.name, "args": json.loads(c.arguments), "id": c.id, "type": "tool_call"}
                for c in m.calls
            ]
            out.append(AIMessage(content=m.text, tool_calls=calls))
        else:
            out.append(ToolMessage(content=m.text, tool_call_id=str(m.call_id), name=m.name))
    return out


def from_langchain(messages: Sequence[Any], users: dict[str, str]) -> list[Msg]:
    from _transcripts import Call
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Msg] = []
    for m in messages:
        text = m.content if isinstance(m.content, str) else json.dumps(m.content)
        if isinstance(m, SystemMessage):
            out.append(Msg("system", text))
        elif isinstance(m, HumanMessage):
            out.append(Msg("user", text, uid=users.get(text, "")))
        elif isinstance(m, AIMessage):
            calls = tuple(
                Call(str(c["id"]), c["name"], json.dumps(c["args"])) for c in m.tool_calls
            )
            out.append(Msg("assistant", text, calls))
        elif isinstance(m, ToolMessage):
            out.append(Msg("tool", text, call_id=m.tool_call_id))
    return out


def run_langchain(corpus: Sequence[Transcript], tally: Tally) -> None:
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    recommended: dict[str, Any] = {
        "strategy": "last",
        "start_on": "human",
        "end_on": ("human", "tool"),
        "include_system": True,
    }
    for transcript in corpus:
        users = user_uids(transcript)
        for request in requests(transcript):
            history = langchain_messages(history_at(transcript, request))
            newest = transcript.turns[request.turn].user.uid
            for n in SIZES:
                for setting, options in (
                    ("LangChain trim_messages defaults, N messages", {}),
                    ("LangChain trim_messages recommended, N messages", recommended),
                ):
                    trimmed = trim_messages(history, max_tokens=n, token_counter=len, **options)
                    record(tally, setting, n, from_langchain(trimmed, users), newest)
            for budget in BUDGETS:
                for setting, options in (
                    ("LangChain trim_messages defaults, tokens", {}),
                    ("LangChain trim_messages recommended, tokens", recommended),
                ):
                    trimmed = trim_messages(
                        history,
                        max_tokens=budget,
                        token_counter=count_tokens_approximately,
                        **options,
                    )
                    over = count_tokens_approximately(trimmed) > budget
                    record(tally, setting, budget, from_langchain(trimmed, users), newest, over)


# -- turnlog --------------------------------------------------------------------------------


def turnlog_message(m: Msg) -> Message:
    if m.role == "system":
        return Message.system(m.text)
    if m.role == "user":
        return Message.user(m.text)
    if m.role == "assistant":
        calls = [ToolCall(c.id, c.name, c.arguments) for c in m.calls]
        return Message.assistant(m.text or None, calls)
    return Message.tool(ToolResult(str(m.call_id), m.name, m.text))


def from_turnlog(messages: Sequence[Message], users: dict[str, str]) -> list[Msg]:
    from _transcripts import Call

    out: list[Msg] = []
    for m in messages:
        if m.role == "tool":
            out += [Msg("tool", r.content, call_id=r.call_id) for r in m.tool_results]
        elif m.role == "user":
            out.append(Msg("user", m.text or "", uid=users.get(m.text or "", "")))
        else:
            calls = tuple(Call(c.id, c.name, c.arguments) for c in m.tool_calls)
            out.append(Msg(m.role, m.text or "", calls))
    return out


def run_turnlog(corpus: Sequence[Transcript], tally: Tally) -> None:
    service = SessionService(MemoryStore())
    windows = [
        *(("turnlog last_turns(N)", n, CompactionWindow.last_turns(n)) for n in SIZES),
        *(("turnlog last_events(N)", n, CompactionWindow.last_events(n)) for n in SIZES),
        *(("turnlog token_budget(B)", b, CompactionWindow.token_budget(b)) for b in BUDGETS),
    ]
    strategies = [(s, n, WindowCompactionStrategy(w)) for s, n, w in windows]
    tokens = event_tokens()  # the counter a token_budget window uses by default
    for transcript in corpus:
        users = user_uids(transcript)
        for setting, n, strategy in strategies:
            sid = f"{transcript.id}/{setting}/{n}"
            service.create(sid)
            service.append_message(sid, turnlog_message(transcript.system))
            for turn in transcript.turns:
                stages = [[turn.user], [turn.calls, *turn.results] if turn.calls else []]
                for stage in stages:
                    if not stage:
                        continue
                    for m in stage:
                        assert m is not None
                        service.append_message(sid, turnlog_message(m))
                    service.compact(sid, lambda request: True, strategy)
                    prompt = from_turnlog(service.view_messages(sid), users)
                    over = "token" in setting and tokens.total(service.view(sid)) > n
                    record(tally, setting, n, prompt, turn.user.uid, over)
                service.append_message(sid, turnlog_message(turn.answer))
            service.delete(sid)


# -- report ---------------------------------------------------------------------------------


def versions() -> str:
    names = ("openai-agents", "pydantic-ai-slim", "langchain-core", "langchain")
    found = ", ".join(f"{name} {version(name)}" for name in names)
    return (
        f"nproc {os.cpu_count()} | Python {platform.python_version()} | "
        f"SQLite {sqlite3.sqlite_version} | {platform.system()} {platform.machine()} | "
        f"load average {os.getloadavg()[0]:.1f}\n"
        f"turnlog {turnlog.__version__} from {os.path.dirname(turnlog.__file__)}\n"
        f"{found}, bfcl-eval {BFCL_VERSION}"
    )


def over(setting: str, counter: Counter[str]) -> str:
    """Prompts over the token budget (by the setting's own counter); "-" for a count window."""
    return f"{counter['over budget']:,}" if is_tokens(setting) else "-"


def is_tokens(setting: str) -> bool:
    return "token" in setting


def crosstab(tally: Tally, *, tokens: bool) -> str:
    """Broken % per N (or budget) in one table: a column per setting, labelled S1, S2, ..."""
    from _harness import table

    settings = [s for s in tally if is_tokens(s) == tokens]
    sizes = sorted({n for s in settings for n in tally[s]})
    labels = [f"{short(s)}" for s in settings]
    rows = []
    for n in sizes:
        cells = []
        for s in settings:
            c = tally[s][n]
            cells.append(f"{100 * c['any'] / c['requests']:.1f}" if c["requests"] else "")
        rows.append([str(n), *cells])
    return table(["tokens" if tokens else "N", *labels], rows)


SHORT = {
    "Agents SDK get_items(limit=N) + input": "SDK get_items",
    "Agents SDK Runner input (limit=N)": "SDK Runner",
    "pydantic-ai messages[-N:] (processor output)": "pai [-N:]",
    "pydantic-ai messages[-N:] as sent (built-in clean)": "pai sent",
    "pydantic-ai messages[-N:] + docs' pairing repair": "pai repair",
    "LangChain trim_messages defaults, N messages": "LC default",
    "LangChain trim_messages recommended, N messages": "LC recommended",
    "LangChain trim_messages defaults, tokens": "LC default",
    "LangChain trim_messages recommended, tokens": "LC recommended",
    "turnlog last_turns(N)": "turnlog turns",
    "turnlog last_events(N)": "turnlog events",
    "turnlog token_budget(B)": "turnlog budget",
}


def short(setting: str) -> str:
    return SHORT.get(setting, setting)


def render(tally: Tally, by_n: bool) -> str:
    from _harness import table

    headers = ["setting", "prompts", *KINDS, "any", "broken %", "over budget", "mean msgs"]
    rows = []
    for setting, sizes in tally.items():
        total: Counter[str] = Counter()
        for counter in sizes.values():
            total.update(counter)
        rows.append(
            [
                setting,
                f"{total['requests']:,}",
                *(f"{total[k]:,}" for k in KINDS),
                f"{total['any']:,}",
                f"{100 * total['any'] / total['requests']:.1f}",
                over(setting, total),
                f"{total['messages'] / total['requests']:.1f}",
            ]
        )
    parts = ["all N (or budgets) together:", table(headers, rows), ""]
    parts += ["broken % by N (any kind); columns in the order of the rows above:"]
    parts += [crosstab(tally, tokens=False), ""]
    parts += ["broken % by token budget (any kind):", crosstab(tally, tokens=True)]
    if by_n:
        for setting, sizes in tally.items():
            per = [
                [
                    str(n),
                    f"{c['requests']:,}",
                    *(f"{c[k]:,}" for k in KINDS),
                    f"{c['any']:,}",
                    f"{100 * c['any'] / c['requests']:.1f}",
                    over(setting, c),
                    f"{c['messages'] / c['requests']:.1f}",
                ]
                for n, c in sorted(sizes.items())
            ]
            unit = "tokens" if is_tokens(setting) else "N"
            parts += ["", f"{setting}, by {unit}:", table([unit, *headers[1:]], per)]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first 20 of each category")
    parser.add_argument("--categories", default=",".join(CATEGORIES))
    parser.add_argument("--summary-only", action="store_true", help="no per-N tables")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    corpus = transcripts(args.categories.split(","), 20 if args.quick else None)
    count = sum(1 for t in corpus for _ in requests(t))
    print(versions())
    print(
        f"{len(corpus)} conversations ({args.categories}), {count:,} model requests, "
        f"{sum(len(list(t.messages())) for t in corpus):,} messages"
    )
    tally: Tally = defaultdict(lambda: defaultdict(Counter))
    timings = {}
    for name, run in (
        ("Agents SDK", lambda: asyncio.run(run_agents(corpus, tally))),
        ("pydantic-ai", lambda: run_pydantic(corpus, tally)),
        ("LangChain", lambda: run_langchain(corpus, tally)),
        ("turnlog", lambda: run_turnlog(corpus, tally)),
    ):
        start = time.perf_counter()
        run()
        timings[name] = time.perf_counter() - start
    print(render(tally, not args.summary_only))
    turnlog_broken = sum(
        c["any"] for s, sizes in tally.items() if s.startswith("turnlog") for c in sizes.values()
    )
    print()
    print(
        f"turnlog: {turnlog_broken} broken prompts (target 0): "
        + ("MET" if not turnlog_broken else "MISSED")
    )
    spent = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    print(
        f"run time {time.perf_counter() - started:.1f} s ({spent}), load average at the end ",
        end="",
    )
    print(f"{os.getloadavg()[0]:.1f}")
    return 0 if not turnlog_broken else 1


if __name__ == "__main__":
    raise SystemExit(main())
