"""Run the turn-runner tests on both runners: `SessionChat`, and `AsyncSessionChat` driven
through a blocking bridge (each call awaited on an event loop of the test's own)."""

import json

from service_modes import BlockingService
from turnlog import SessionService, SqliteStore
from turnlog.chat import SessionChat
from turnlog.chat_async import AsyncSessionChat
from turnlog.service_async import AsyncSessionService
from turnlog.stores.sqlite_async import AsyncSqliteStore
from turnlog.testing.contract_async import LoopThread
from turnlog.testing.fakes import AsyncScriptedChatModel, ScriptedChatModel
from turnlog.toolsearch.search import ToolSearch
from turnlog.toolsearch.search_async import AsyncToolSearch

KINDS = ["sync", "async"]


class BlockingChat:
    """An `AsyncSessionChat` with blocking `send` and a `stream` that returns the list."""

    def __init__(self, chat, loop):
        self.chat = chat
        self._loop = loop

    def send(self, session_id, text, **kwargs):
        return self._loop.run(self.chat.send(session_id, text, **kwargs))

    def stream(self, session_id, text, **kwargs):
        async def collect():
            return [e async for e in self.chat.stream(session_id, text, **kwargs)]

        return self._loop.run(collect())


class Harness:
    """One runner kind over a SQLite file: `make(replies, **settings)` builds a chat."""

    def __init__(self, kind, tmp_path):
        self.kind = kind
        self.loop = None
        if kind == "sync":
            self.service = SessionService(SqliteStore(tmp_path / "chat.db"))
        else:
            self.loop = LoopThread()
            self.async_service = AsyncSessionService(AsyncSqliteStore(tmp_path / "chat.db"))
            self.service = BlockingService(self.async_service, self.loop)

    def model(self, replies, **settings):
        kind = ScriptedChatModel if self.kind == "sync" else AsyncScriptedChatModel
        return kind(replies, **settings)

    def tool_search(self, **settings):
        if self.kind == "sync":
            return ToolSearch(service=self.service, **settings)
        return AsyncToolSearch(service=self.async_service, **settings)

    def make(self, model, **settings):
        if self.kind == "sync":
            return SessionChat(self.service, model, **settings)
        return BlockingChat(AsyncSessionChat(self.async_service, model, **settings), self.loop)

    def close(self):
        try:
            self.service.close()
        finally:
            if self.loop is not None:
                self.loop.stop()


def alternation_breaks(body):
    """Where a request body (OpenAI or Anthropic format) has two user messages in a row, as
    strict servers (llama-cpp-python's chat templates, the Messages API) refuse; [] when none."""
    roles = [m["role"] for m in body.get("messages", []) if m["role"] != "system"]
    return [i for i in range(1, len(roles)) if roles[i] == roles[i - 1] == "user"]


def enforce_alternation(server, provider):
    """Make `server` answer 400, as a strict server does, to a request with two user messages
    in a row."""
    from model_servers import Reply, anthropic_error, openai_error

    def rewrite(request, reply):
        if not isinstance(request.body, dict) or not alternation_breaks(request.body):
            return reply
        server.replies.appendleft(reply)  # the scripted reply waits for a valid request
        message = "roles must alternate between user and assistant"
        body = (
            openai_error(400, message)
            if provider == "openai"
            else anthropic_error("invalid_request_error", message)
        )
        return Reply(400, json.dumps(body).encode())

    server.rewrite = rewrite
