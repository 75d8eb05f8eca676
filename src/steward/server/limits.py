"""Limits every request meets before any route reads it: the size of its body, and no NUL in its
address."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steward.server.errors import problem


class BodyLimit:
    """Refuse a request body larger than ``limit`` bytes (413), declared or streamed, and an
    address with a NUL in it (no store keeps one; PostgreSQL fails on it)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await problem(413, f"the request body is over {self.limit // 1024} KiB")(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b"").lower():
            await problem(400, "the address may not contain NUL characters (%00)")(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._too_large(scope, receive, send)
            return
        if declared is not None:
            await self.app(scope, receive, send)  # the server reads no more than it declared
            return
        # A body sent in chunks with no length: read (up to the limit) before the app sees it.
        chunks: list[bytes] = []
        size = 0
        for _ in range(10**6):  # bounded by the limit: each chunk adds to the size
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await problem(413, f"the request body is over {self.limit // 1024} KiB")(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)
