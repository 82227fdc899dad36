"""`turnlog serve`: the local, read-only web viewer (extra `turnlog[viewer]`)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import sys
from urllib.parse import quote

from turnlog.errors import InvalidInput
from turnlog.service import SessionService

__all__ = [
    "SERVE_DETAILS",
    "SERVE_EXAMPLE",
    "SERVE_SUMMARY",
    "TOKEN_VARIABLE",
    "add_serve_arguments",
    "cmd_serve",
]

TOKEN_VARIABLE = "TURNLOG_VIEWER_TOKEN"
"""The environment variable that holds the viewer's token (not shown in `ps`, unlike --token)."""

SERVE_SUMMARY = "browse sessions, logs, compactions and past views in a local web viewer"
SERVE_EXAMPLE = (
    "turnlog serve\n  turnlog --store postgresql://app@db:5432/chat serve --port 9000\n"
    '  TURNLOG_VIEWER_TOKEN="$(openssl rand -hex 16)" turnlog serve --host 0.0.0.0'
)
SERVE_DETAILS = (
    "Read-only: no page or endpoint writes. It binds 127.0.0.1 unless --host says otherwise; "
    "on any other address every request must carry a token (at least 16 characters): set "
    "TURNLOG_VIEWER_TOKEN, or one is generated and printed once (open the printed address once, "
    "or send Authorization: Bearer TOKEN); --token works too but shows in `ps`. JSON: "
    "/api/sessions, /api/sessions/ID/log?after=&limit=, /api/sessions/ID/view?at=. Needs "
    "pip install 'turnlog[viewer]'."
)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `turnlog serve`."""
    parser.add_argument("--host", default="127.0.0.1", help="the address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="the port (8765)")
    parser.add_argument(
        "--token",
        default=None,
        help=f"require this token on every request (visible in `ps`: prefer ${TOKEN_VARIABLE})",
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_serve(svc: SessionService, args: argparse.Namespace) -> int:
    """Serve the viewer over `svc` until interrupted.

    The token is `--token`, else $TURNLOG_VIEWER_TOKEN; on a non-loopback host without either,
    one is generated and printed once.

    Raises:
        InvalidInput: a bad port, or an empty or short token.
        ImportError: the `viewer` extra is not installed.
    """
    if not 0 < args.port < 65536:
        raise InvalidInput(f"--port must be from 1 to 65535, got {args.port}")
    token = args.token
    if token is not None:
        if not token.strip():
            raise InvalidInput("--token needs a value, not an empty string")
        print(
            f"warning: --token shows in `ps` to every user of this machine: set "
            f"{TOKEN_VARIABLE} instead",
            file=sys.stderr,
        )
    elif os.environ.get(TOKEN_VARIABLE, "").strip():
        token = os.environ[TOKEN_VARIABLE].strip()
    generated = token is None and not _loopback(args.host)
    if generated:
        token = secrets.token_urlsafe(32)
    try:
        import uvicorn

        from turnlog.viewer import create_app
    except ImportError as exc:
        raise ImportError(
            f"turnlog serve needs the viewer extra ({exc.name} is missing): "
            "pip install 'turnlog[viewer]'"
        ) from None
    app = create_app(svc, token=token)
    host = f"[{args.host}]" if ":" in args.host else args.host
    where = f"http://{host}:{args.port}/"
    scope = "this machine only" if _loopback(args.host) else f"every address {args.host} reaches"
    if generated:
        assert token is not None
        print(
            f"turnlog viewer (read-only) on {where}?token={quote(token, safe='')}", file=sys.stderr
        )
        print(
            f"a token was generated for this run (shown once; set {TOKEN_VARIABLE} to choose it)",
            file=sys.stderr,
        )
    else:
        needs = "" if token is None else " (open it with ?token=TOKEN once)"
        print(f"turnlog viewer (read-only) on {where}{needs}", file=sys.stderr)
    print(f"bound to {args.host}: reachable from {scope}; Ctrl-C stops it", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
