"""`turnlog serve`: the local, read-only web viewer (extra `turnlog[viewer]`)."""

from __future__ import annotations

import argparse
import ipaddress
import sys

from turnlog.errors import InvalidInput
from turnlog.service import SessionService

__all__ = ["SERVE_DETAILS", "SERVE_EXAMPLE", "SERVE_SUMMARY", "add_serve_arguments", "cmd_serve"]

SERVE_SUMMARY = "browse sessions, logs, compactions and past views in a local web viewer"
SERVE_EXAMPLE = (
    "turnlog serve\n  turnlog --store postgresql://app@db:5432/chat serve --port 9000\n"
    '  turnlog serve --host 0.0.0.0 --token "$(openssl rand -hex 16)"'
)
SERVE_DETAILS = (
    "Read-only: no page or endpoint writes. It binds 127.0.0.1 unless --host says otherwise; "
    "on any other address pass --token, which every request must then carry (open the printed "
    "address once, or send Authorization: Bearer TOKEN). JSON: /api/sessions, "
    "/api/sessions/ID/log?after=&limit=, /api/sessions/ID/view?at=. Needs "
    "pip install 'turnlog[viewer]'."
)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `turnlog serve`."""
    parser.add_argument("--host", default="127.0.0.1", help="the address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="the port (8765)")
    parser.add_argument("--token", default=None, help="require this token on every request")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_serve(svc: SessionService, args: argparse.Namespace) -> int:
    """Serve the viewer over `svc` until interrupted.

    Raises:
        InvalidInput: a bad port, an empty token, or a non-loopback host without a token.
        ImportError: the `viewer` extra is not installed.
    """
    if not 0 < args.port < 65536:
        raise InvalidInput(f"--port must be from 1 to 65535, got {args.port}")
    if args.token is not None and not args.token.strip():
        raise InvalidInput("--token needs a value, not an empty string")
    if not _loopback(args.host) and args.token is None:
        raise InvalidInput(
            f"--host {args.host} lets other machines read every session: pass --token TOKEN too"
        )
    try:
        import uvicorn

        from turnlog.viewer import create_app
    except ImportError as exc:
        raise ImportError(
            f"turnlog serve needs the viewer extra ({exc.name} is missing): "
            "pip install 'turnlog[viewer]'"
        ) from None
    app = create_app(svc, token=args.token)
    host = f"[{args.host}]" if ":" in args.host else args.host
    where = f"http://{host}:{args.port}/"
    shown = where if args.token is None else f"{where}?token={args.token}"
    scope = "this machine only" if _loopback(args.host) else f"every address {args.host} reaches"
    print(f"turnlog viewer (read-only) on {shown}", file=sys.stderr)
    print(f"bound to {args.host}: reachable from {scope}; Ctrl-C stops it", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
