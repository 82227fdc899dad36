"""The viewer's ASGI app: read-only pages and JSON endpoints over a `SessionService`.

    from turnlog.viewer import create_app
    app = create_app("sqlite:///turnlog.db")          # or create_app(SessionService(store))
    # uvicorn.run(app, host="127.0.0.1", port=8765)   # `turnlog serve` does this

Every page is rendered by Jinja2 with autoescaping, and served with a Content-Security-Policy
that allows no script at all, so stored text (messages, tool arguments, metadata, ids) can only
ever show up as text. Only GET and HEAD are routed: the viewer never writes.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

try:
    from jinja2 import Environment, FileSystemLoader, select_autoescape
    from markupsafe import Markup
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import (
        HTMLResponse,
        JSONResponse,
        PlainTextResponse,
        RedirectResponse,
        Response,
    )
    from starlette.routing import Route
except ImportError as exc:  # pragma: no cover - exercised by a base install only
    raise ImportError(
        f"the turnlog viewer needs its extra ({exc.name} is missing): pip install 'turnlog[viewer]'"
    ) from exc

from turnlog.errors import InvalidInput, SessionNotFound, TurnlogError
from turnlog.parts import AudioPart, FilePart, ImagePart
from turnlog.service import SessionService
from turnlog.stores.opening import open_store
from turnlog.tokens import default_counter
from turnlog.viewer import data

__all__ = [
    "BIDI_CONTROLS",
    "CSP",
    "MIN_TOKEN_LENGTH",
    "SECURITY_HEADERS",
    "TOKEN_COOKIE",
    "create_app",
]

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
"""The Content-Security-Policy of every response: no script, no outside asset."""

TOKEN_COOKIE = "turnlog_viewer_token"
"""The cookie that remembers a `?token=` once it was accepted."""

MIN_TOKEN_LENGTH = 16
"""The shortest token the viewer takes (`secrets.token_urlsafe()` gives 43 characters)."""

SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
)
"""The headers of every response: pages, JSON, redirects, 401, 404, 421 and 500 alike."""

_TEMPLATES = Path(__file__).parent / "templates"
_TOKEN = re.compile(rf"[A-Za-z0-9._~+/=-]{{{MIN_TOKEN_LENGTH},512}}")
_LOOPBACK_HOST = re.compile(r"(127(\.\d{1,3}){3}|localhost|\[::1\])(:\d+)?", re.IGNORECASE)


_MOST = 2**63 - 1  # the largest seq, offset or limit a store takes (64-bit integers)


def _int(request: Request, name: str, default: int | None, *, low: int = 0) -> int | None:
    raw = request.query_params.get(name, "")
    if raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer, got {raw[:40]!r}") from None
    if value < low:
        raise InvalidInput(f"{name} must be at least {low}, got {value}")
    if value > _MOST:
        raise InvalidInput(f"{name} must be at most 2**63 - 1, got {value}")
    return value


def _limit(request: Request, default: int) -> int:
    value = _int(request, "limit", default, low=1)
    assert value is not None
    return min(value, data.MAX_PAGE)


BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
"""The characters that reorder text around them; pages show each as `[U+XXXX]`."""

_VISIBLE = str.maketrans({c: f"[U+{ord(c):04X}]" for c in BIDI_CONTROLS})


def _visible(value: Any) -> Any:
    """Every printed value with its bidi controls made visible (Jinja's `finalize`), so that a
    stored U+202E cannot turn the text around it, or a page's layout, around."""
    if isinstance(value, Markup):
        return Markup(str(value).translate(_VISIBLE))  # the marks hold no HTML character
    if isinstance(value, str):
        return value.translate(_VISIBLE)
    return value


def _pretty(value: Any) -> str:
    """JSON text of `value`, indented, or a JSON string's text as it is when it parses."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    text: str = json.dumps(value, indent=2, ensure_ascii=False)
    return text


def create_app(service_or_store_url: SessionService | str, token: str | None = None) -> Starlette:
    """The viewer as an ASGI app.

    Args:
        service_or_store_url: the service to read, or a store URL (`sqlite:///path`,
            `postgresql://...`, `redis://...`, `memory://`) to open one; a service made here is
            closed when the app shuts down.
        token: when given, every request must carry it: `?token=T` (answered by a redirect to
            the same address without it, which sets an HttpOnly, SameSite=Strict cookie), the
            cookie, or `Authorization: Bearer T`. At least 16 letters, digits and `-._~+/=`.

    Returns:
        A Starlette app: HTML pages at `/`, `/sessions/{id}`, `/sessions/{id}/view`,
        `/sessions/{id}/diff`; an event's whole text at `/sessions/{id}/events/{seq}/text`
        (text/plain); the inline bytes of a part at `/sessions/{id}/events/{seq}/parts/{i}` and
        of a tool result's part at `.../events/{seq}/results/{r}/parts/{i}` (with the part's
        media type; as an attachment unless a raster image, `data.INLINE_IMAGE_TYPES`); JSON
        at `/api/sessions`, `/api/search?q=WORDS[&session=ID]`, `/api/sessions/{id}/log`,
        `/api/sessions/{id}/view`, `/api/sessions/{id}/diff`. `/search?q=WORDS` finds the
        messages that said them, in every session (the store's history index).

    Raises:
        InvalidInput: a token shorter than 16 characters or with other characters, or a bad
            store URL.

    Without a token, only requests whose Host is a loopback name (`127.0.0.1`, `localhost`,
    `[::1]`, any port) are answered: a web page elsewhere cannot read the sessions by
    pointing a name of its own at 127.0.0.1 (DNS rebinding).
    """
    if token is not None and not _TOKEN.fullmatch(token):
        raise InvalidInput(
            f"the viewer's token must be at least {MIN_TOKEN_LENGTH} characters, letters, "
            "digits and -._~+/= only: for example the output of `openssl rand -hex 16`"
        )
    owned = not isinstance(service_or_store_url, SessionService)
    svc = (
        SessionService(open_store(service_or_store_url))
        if isinstance(service_or_store_url, str)
        else service_or_store_url
    )
    env = Environment(
        loader=FileSystemLoader(_TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_visible,
    )
    env.filters["pretty"] = _pretty
    env.filters["folded"] = data.folded
    env.globals["TEXT_SHOWN_UP_TO"] = data.TEXT_SHOWN_UP_TO

    def page(name: str, code: int = 200, **context: Any) -> HTMLResponse:
        html = env.get_template(name).render(**context)
        return HTMLResponse(html, status_code=code)

    def endpoint(
        html: str | None, read: Callable[[Request], dict[str, Any]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            try:
                result = await run_in_threadpool(read, request)
            except SessionNotFound as exc:
                return _error(html, 404, f"no session {exc.session_id!r} in this store")
            except InvalidInput as exc:
                return _error(html, 400, str(exc))
            except TurnlogError as exc:
                return _error(html, 500, f"{type(exc).__name__}: {exc}")
            if html is None:
                return JSONResponse(result)
            return page(html, **result)

        return handle

    def _error(html: str | None, status: int, message: str) -> Response:
        if html is None:
            return JSONResponse({"error": message}, status_code=status)
        return page("error.html", status, status=status, message=message)

    def sessions(request: Request) -> dict[str, Any]:
        offset, limit = _int(request, "offset", 0) or 0, _limit(request, 50)
        if offset + limit + 1 > _MOST:  # the page reads one session past its end
            raise InvalidInput(
                f"offset {offset} is past the end of any store: at most 2**63 - 2 - limit"
            )
        return data.sessions_page(
            svc, query=request.query_params.get("q", ""), offset=offset, limit=limit
        )

    def search(request: Request) -> dict[str, Any]:
        params = request.query_params
        return data.history_page(svc, query=params.get("q", ""), session=params.get("session", ""))

    def log(request: Request) -> dict[str, Any]:
        seq = _int(request, "seq", None, low=1)  # the page that starts at this event
        return data.log_page(
            svc,
            request.path_params["session_id"],
            after=seq - 1 if seq is not None else _int(request, "after", 0) or 0,
            limit=_limit(request, 100),
        )

    def view(request: Request) -> dict[str, Any]:
        return data.view_at(
            svc,
            request.path_params["session_id"],
            at=_int(request, "at", None),
            offset=_int(request, "offset", 0) or 0,
            limit=_limit(request, 100),
        )

    def diff(request: Request) -> dict[str, Any]:
        a, b = _int(request, "a", None), _int(request, "b", None)
        if a is None or b is None:
            raise InvalidInput("a diff needs two seqs: ?a=SEQ&b=SEQ")
        return data.diff(
            svc,
            request.path_params["session_id"],
            a,
            b,
            offset=_int(request, "offset", 0) or 0,
            limit=_limit(request, 100),
        )

    def text(request: Request) -> str | None:
        found = data.event_at(svc, request.path_params["session_id"], request.path_params["seq"])
        return None if found is None else data.text_of(found)

    async def full_text(request: Request) -> Response:
        sid, seq = request.path_params["session_id"], request.path_params["seq"]
        try:
            body = await run_in_threadpool(text, request)
        except SessionNotFound as exc:
            return PlainTextResponse(f"no session {exc.session_id!r} in this store", 404)
        except TurnlogError as exc:
            return PlainTextResponse(f"{type(exc).__name__}: {exc}", 500)
        if body is None:
            return PlainTextResponse(f"no event at seq {seq} in session {sid!r}", 404)
        return PlainTextResponse(body)

    def part(request: Request) -> ImagePart | FilePart | AudioPart | None:
        params = request.path_params
        return data.part_bytes(
            svc, params["session_id"], params["seq"], params["index"], params.get("result")
        )

    async def part_bytes(request: Request) -> Response:
        sid, seq = request.path_params["session_id"], request.path_params["seq"]
        try:
            found = await run_in_threadpool(part, request)
        except SessionNotFound as exc:
            return PlainTextResponse(f"no session {exc.session_id!r} in this store", 404)
        except TurnlogError as exc:
            return PlainTextResponse(f"{type(exc).__name__}: {exc}", 500)
        if found is None:
            return PlainTextResponse(
                f"no part with inline bytes there in the event at seq {seq} of session {sid!r}",
                404,
            )
        assert found.data is not None
        headers = {}
        if found.media_type.lower() not in data.INLINE_IMAGE_TYPES:
            name = data.part_filename(found, f"part-{seq}-{request.path_params['index']}")
            headers["content-disposition"] = f'attachment; filename="{name}"'
        return Response(found.data, media_type=found.media_type, headers=headers)

    # Ids may hold "/" (sent as %2F, decoded before routing): the routes with a suffix come
    # first, and the id takes the rest of the path.
    sid = "{session_id:path}"
    routes = [
        Route("/", endpoint("sessions.html", sessions)),
        Route("/search", endpoint("search.html", search)),
        Route(f"/sessions/{sid}/view", endpoint("view.html", view)),
        Route(f"/sessions/{sid}/diff", endpoint("diff.html", diff)),
        Route(f"/sessions/{sid}/events/{{seq:int}}/text", full_text),
        Route(f"/sessions/{sid}/events/{{seq:int}}/parts/{{index:int}}", part_bytes),
        Route(
            f"/sessions/{sid}/events/{{seq:int}}/results/{{result:int}}/parts/{{index:int}}",
            part_bytes,
        ),
        Route(f"/sessions/{sid}", endpoint("session.html", log)),
        Route("/api/sessions", endpoint(None, sessions)),
        Route("/api/search", endpoint(None, search)),
        Route(f"/api/sessions/{sid}/log", endpoint(None, log)),
        Route(f"/api/sessions/{sid}/view", endpoint(None, view)),
        Route(f"/api/sessions/{sid}/diff", endpoint(None, diff)),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Load the tokenizer now (about a second), not on the first page someone opens.
        await run_in_threadpool(default_counter().count, "warm up")
        yield
        if owned:
            await run_in_threadpool(svc.close)

    return _Viewer(token, routes=routes, lifespan=lifespan)


class _Viewer(Starlette):
    """Starlette with the guard outside everything, its error handling included, so that an
    unhandled 500 carries the security headers too."""

    def __init__(self, token: str | None, **kwargs: Any) -> None:
        self._token = token
        super().__init__(**kwargs)

    def build_middleware_stack(self) -> Any:
        return _Guard(super().build_middleware_stack(), self._token)


def _without_token(scope: Any) -> str:
    """The request's path and query, as sent, less its `token` parameters."""
    path = scope.get("raw_path") or scope["path"].encode()
    kept = [
        part
        for part in scope.get("query_string", b"").split(b"&")
        if part and unquote_plus(part.split(b"=", 1)[0].decode("latin-1")) != "token"
    ]
    target: str = path.decode("latin-1")
    return target + ("?" + b"&".join(kept).decode("latin-1") if kept else "")


class _Guard:
    """Checks the token (when there is one) and adds the security headers to every response."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode("latin-1").lower() not in _SECURITY_NAMES
                ]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS]
                message = {**message, "headers": headers}
            await send(message)

        request = Request(scope)
        if self.token is None:
            if not _LOOPBACK_HOST.fullmatch(request.headers.get("host", "")):
                response: Response = JSONResponse(
                    {"error": "this viewer answers only to 127.0.0.1, localhost or [::1] "
                     "(start it with a token to serve other names)"},
                    status_code=421,
                )  # fmt: skip
                await response(scope, receive, send_secured)
                return
            await self.app(scope, receive, send_secured)
            return
        given = request.query_params.get("token")
        auth = request.headers.get("authorization", "")
        bearer = auth[7:] if auth.lower().startswith("bearer ") else None
        cookie = request.cookies.get(TOKEN_COOKIE)
        valid = {
            name: value is not None and hmac.compare_digest(value.encode(), self.token.encode())
            for name, value in (("given", given), ("bearer", bearer), ("cookie", cookie))
        }
        if not any(valid.values()):
            response = JSONResponse(
                {"error": "this viewer needs its token: open it with ?token=... "
                 "or send Authorization: Bearer ..."},
                status_code=401,
            )  # fmt: skip
            await response(scope, receive, send_secured)
            return
        if given is not None:
            # Move the token out of the address bar (and the history) into a cookie. No
            # Secure flag: the viewer speaks plain HTTP, where a Secure cookie is never sent.
            response = RedirectResponse(_without_token(scope), status_code=303)
            if valid["given"]:
                response.set_cookie(
                    TOKEN_COOKIE, self.token, path="/", httponly=True, samesite="strict"
                )
            await response(scope, receive, send_secured)
            return
        await self.app(scope, receive, send_secured)


_SECURITY_NAMES = frozenset(name for name, _ in SECURITY_HEADERS)
