"""`turnlog search`: find events of the logs by their words (the history index)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from turnlog.cli_render import dumps, visible, when
from turnlog.errors import InvalidInput
from turnlog.service import SessionService

__all__ = [
    "SEARCH_DETAILS",
    "SEARCH_EXAMPLE",
    "SEARCH_SUMMARY",
    "add_search_arguments",
    "cmd_search",
]

SEARCH_SUMMARY = "find events of the logs by their words, covered ones included"
SEARCH_EXAMPLE = (
    'turnlog search "dentist appointment" --session support-42\n'
    '  turnlog search "refund" --where owner=u-42 --after 2026-11-01 --json'
)
SEARCH_DETAILS = (
    "Every message the logs keep is searched (BM25 over its words; on PostgreSQL, ts_rank), "
    "also those a compaction took out of the view; summaries and stand-ins are not. Each hit "
    "shows its session, seq, when it was said, role, score and a snippet; `turnlog show "
    "SESSION --log` shows it in place. Dates are ISO 8601 (a date alone is midnight UTC)."
)


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `turnlog search`."""
    parser.add_argument("query", help="the words to look for")
    parser.add_argument(
        "--session", action="append", metavar="ID", help="only this session (repeatable)"
    )
    parser.add_argument(
        "--where",
        action="append",
        metavar="NAME=VALUE",
        help="only sessions whose metadata NAME is VALUE (a string; repeatable)",
    )
    parser.add_argument("-k", type=int, default=10, metavar="N", help="how many hits (10)")
    parser.add_argument("--before", metavar="DATE", help="only events said before DATE")
    parser.add_argument("--after", metavar="DATE", help="only events said after DATE")
    parser.add_argument(
        "--role",
        action="append",
        choices=("system", "user", "assistant", "tool"),
        help="only messages of this role (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="a JSON list of hits, for scripts")


def _date(value: str | None, what: str) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(
            f"--{what} {value!r} is not an ISO 8601 date: use 2026-11-01 or 2026-11-01T09:30+01:00"
        ) from None
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


def _where(pairs: list[str] | None) -> dict[str, str | int | bool] | None:
    if not pairs:
        return None
    out: dict[str, str | int | bool] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InvalidInput(f"--where takes NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def cmd_search(svc: SessionService, args: argparse.Namespace) -> int:
    """Print the hits of `args.query`."""
    before, after = _date(args.before, "before"), _date(args.after, "after")
    hits = svc.search(
        args.query,
        sessions=args.session,
        metadata=_where(args.where),
        k=args.k,
        before=before,
        after=after,
        roles=args.role,
    )
    if args.json:
        print(
            dumps(
                [
                    {
                        "session": h.session_id,
                        "event_id": h.event_id,
                        "seq": h.seq,
                        "said_at": h.said_at.isoformat(),
                        "timestamp": h.timestamp.isoformat(),
                        "role": h.role,
                        "score": round(h.score, 6),
                        "snippet": h.snippet,
                    }
                    for h in hits
                ]
            )
        )
        return 0
    if not hits:
        print(f"no event matches {visible(args.query)}")
        return 0
    for h in hits:
        print(
            f"{visible(h.session_id)}  #{h.seq}  {when(h.said_at)}  {h.role:<9}  "
            f"{h.score:.3f}\n    {visible(h.snippet)}"
        )
    return 0
