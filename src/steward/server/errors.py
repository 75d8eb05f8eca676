"""Errors of the HTTP API: JSON problem details (RFC 9457) that name the fix, never a traceback."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from steward.errors import StewardError
from steward.jobs.store import JobError
from steward.server import schemas as s

log = logging.getLogger("steward.server")

PROBLEM = "application/problem+json"
# The errors a /v1 route may answer, documented as they are sent (problem details, not FastAPI's
# JSON shapes; its own 422 is replaced by this one).
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"content": {PROBLEM: {"schema": s.Problem.model_json_schema()}}}
    for status in (400, 401, 403, 404, 409, 413, 422)
}
_TITLES = {400: "Bad request", 401: "Unauthorized", 404: "Not found", 409: "Conflict", 413: "Too large"}


class ApiError(Exception):
    """A request that cannot be served; ``detail`` names the fix."""

    def __init__(self, status: int, detail: str, title: str = "") -> None:
        super().__init__(detail)
        self.status, self.detail, self.title = status, detail, title


def problem(status: int, detail: str, title: str = "", headers: dict[str, str] | None = None) -> JSONResponse:
    body = s.Problem(title=title or _TITLES.get(status, "Error"), status=status, detail=detail)
    if status == 401 and headers is None:
        headers = {"WWW-Authenticate": "Bearer"}
    return JSONResponse(body.model_dump(), status_code=status, media_type=PROBLEM, headers=headers)


async def _api_error(_r: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return problem(exc.status, exc.detail, exc.title)


async def _steward_error(_r: Request, exc: Exception) -> JSONResponse:
    # Our own errors name the fix; a job that cannot change the way asked is a conflict.
    text = str(exc)
    if text.startswith("no ") and "in the store" in text:  # an unknown job, run or session
        return problem(404, text)
    return problem(409, text) if isinstance(exc, JobError) else problem(400, text)


async def _invalid(_r: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    detail = "; ".join(parts) or "the request is not valid"
    # A NUL is allowed by the document's types but kept by no store: the request, not its
    # shape, is what is wrong.
    return problem(400 if "NUL" in detail else 422, detail, "Invalid request")


async def _http_error(_r: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    response = problem(exc.status_code, str(exc.detail))
    response.headers.update(exc.headers or {})  # a 405's Allow (RFC 9110)
    return response


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error serving %s %s", request.method, request.url.path)
    return problem(500, f"the server failed ({type(exc).__name__}); its log has the details", "Error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StewardError, _steward_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
