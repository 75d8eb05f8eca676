"""Limits every request meets before any route reads it: the size of its body, the shape of the
JSON in it, and no NUL in its address.

Every body is checked here, once, whatever its route or content type (the chat webhook reads its
body as JSON whatever it is labelled): no deeper than ``MAX_DEPTH`` levels of arrays and
objects (JSON parsers and schema checkers recurse once per level), and numbers that are finite
and, when whole, fit in 64 bits (``NaN``, ``Infinity`` and ``1e400`` are not JSON a store or
another client can keep). A body that is not JSON at all is left to its route, which says so.
"""

from __future__ import annotations

import json
import math
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steward.server.errors import problem

MAX_DEPTH = 32  # levels of arrays and objects in one JSON body
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a string may hold brackets: not counted
_BRACKETS = re.compile(rb"[\[\]{}]")
_INT_LIMIT = 2**63


class JsonLimitError(ValueError):
    """A body that is JSON (or would be) past a limit; the message names the limit."""


def _depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in ``body`` (valid JSON or not): a linear scan
    with strings blanked out, so it cannot recurse however deep the body goes."""
    depth = deepest = 0
    for bracket in _BRACKETS.finditer(_STRINGS.sub(b'""', body)):
        depth += 1 if bracket[0] in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _constant(name: str) -> float:
    raise JsonLimitError(f"the JSON body holds {name}; numbers must be finite (JSON has no {name})")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonLimitError(
            f"the JSON body holds {text[:20]}, which is not finite as a number; send a finite one"
        )
    return value


def _int(text: str) -> int:
    # Checked on its length first: Python refuses to read an int of more than 4,300 digits.
    if len(text.lstrip("-")) > 19 or not -_INT_LIMIT <= int(text) < _INT_LIMIT:
        raise JsonLimitError(f"the JSON body holds the integer {text[:20]}..., which does not fit in 64 bits")
    return int(text)


def check_json(body: bytes) -> None:
    """Raise ``JsonLimitError`` when ``body`` nests deeper than ``MAX_DEPTH`` or holds a number
    that is not finite or does not fit in 64 bits; a body that is not JSON passes (its route
    refuses it)."""
    if _depth(body) > MAX_DEPTH:
        raise JsonLimitError(
            f"the JSON body nests deeper than {MAX_DEPTH} levels of arrays and objects; send a flatter one"
        )
    try:
        json.loads(body, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except JsonLimitError:
        raise
    except (ValueError, RecursionError):  # not JSON (or not UTF-8): its route says so
        return


class RequestLimits:
    """Refuse a request body larger than ``limit`` bytes (413), declared or streamed; JSON in it
    past the limits above (400); and an address with a NUL in it (no store keeps one;
    PostgreSQL fails on it)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

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
        body = await self._read(receive)
        if body is None:  # the client went away: the app hears so, as it would have

            async def gone() -> Message:
                return {"type": "http.disconnect"}

            await self.app(scope, gone, send)
            return
        if len(body) > self.limit:
            await self._too_large(scope, receive, send)
            return
        try:
            check_json(body)
        except JsonLimitError as exc:
            await problem(400, str(exc), "Bad request")(scope, receive, send)
            return
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await problem(413, f"the request body is over {self.limit // 1024} KiB")(scope, receive, send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body (the server reads no more than a declared length), or as much as is
        past the limit; None when the client went away."""
        chunks: list[bytes] = []
        size = 0
        for _ in range(10**6):  # bounded by the limit: each chunk adds to the size
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if size > self.limit:
                break
            if not message.get("more_body", False):
                break
        return b"".join(chunks)
