"""The one wording of provider failures: one line each, naming the fix.

Both providers map their SDK's exceptions onto these, so a bad key, an unknown model or an
unreachable server reads the same whichever provider is behind it.

Two rules keep a failure from being sent again and again. A request the server calls invalid
(its body says so, whatever the status: llama-cpp-python answers a validation error with 500)
fails the same way every time, so it is sent once. And a failure the provider's own retries
already met is a ``RetriesSpentError``: the loop's ``RetryingModel`` leaves it alone instead of
multiplying the provider's tries by its own.
"""

from __future__ import annotations

import re

from steward.errors import ModelError

__all__ = [
    "RetriesSpentError",
    "is_invalid_request",
    "readable",
    "spent",
    "status_error",
    "timeout_error",
    "unreachable_error",
]


class RetriesSpentError(ModelError):
    """A retryable failure the provider has already tried again itself, ``retries`` times.

    Still ``retryable`` (a later run may well succeed), but the loop's ``RetryingModel``, whose
    job is a reply that broke off after it started, does not send it again.
    """

    def __init__(
        self, message: str, *, provider: str, retries: int, retry_after: float | None = None
    ) -> None:
        super().__init__(message, provider=provider, retryable=True, retry_after=retry_after)
        self.retries = retries


def spent(error: ModelError, retries: int) -> ModelError:
    """``error`` marked as already retried by the provider (when it was retried at all)."""
    if not error.retryable or retries <= 0 or isinstance(error, RetriesSpentError):
        return error
    return RetriesSpentError(
        str(error), provider=error.provider, retries=retries, retry_after=error.retry_after
    )


# What servers say when the request itself is wrong: pydantic (llama-cpp-python, vLLM, LiteLLM),
# FastAPI, OpenAI's and Anthropic's own error types; and a prompt longer than the model's context
# (llama.cpp's server says so inside a stream, where no status comes with it).
_INVALID_WORDS = re.compile(
    r"input should be|validation error|field required|extra inputs are not permitted|"
    r"invalid_request_error|badrequest|bad request|unprocessable|is not valid under|"
    r"invalid value|missing required|unexpected field|could not parse|json decode|"
    r"exceeds? the available context|exceed_context_size|maximum context length",
    re.IGNORECASE,
)
_OVER_CONTEXT = re.compile(r"exceeds? the available context|exceed_context_size|maximum context length", re.I)


# One pydantic error as servers print it: {'type': 'string_type', 'loc': ('body', 'messages', 1,
# 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', ...}
_PYDANTIC_ERROR = re.compile(
    r"'type':\s*'(?P<type>[^']+)',\s*'loc':\s*\((?P<loc>[^)]*)\),\s*'msg':\s*(?P<q>['\"])(?P<msg>.*?)(?P=q)"
)


def readable(detail: str, most: int = 300) -> str:
    """A server's error text on one line; pydantic validation errors (a union's members each
    failing: several lines of noise) shortened to the field and what is wrong with it."""
    found = list(_PYDANTIC_ERROR.finditer(detail))
    # A field of a union type fails once per member; the literal errors (role) are the noise.
    telling = [m for m in found if m.group("type") != "literal_error"] or found
    lines: list[str] = []
    for match in telling:
        parts = [p.strip().strip("'\"") for p in match.group("loc").split(",")]
        # Leave out "body" and the model classes a union tried (CamelCase names).
        where = ".".join(p for p in parts if p and p != "body" and not p[:1].isupper())
        line = f"{where}: {match.group('msg')}" if where else match.group("msg")
        if line not in lines:
            lines.append(line)
    text = "; ".join(lines) if lines else detail
    return " ".join(text.split())[:most]


def is_invalid_request(status: int, detail: str, kind: str | None = None) -> bool:
    """The server says the request itself is wrong: sending it again cannot help."""
    if status in (408, 409, 429):
        return False
    return status in (400, 422) or _INVALID_WORDS.search(f"{kind or ''} {detail}") is not None


def timeout_error(label: str, url: str, timeout: float | None, *, what: str = "") -> ModelError:
    """No reply within ``timeout`` (the bound of a model call; of ``what`` when named, a request
    with its own bound that ``timeout_s`` does not raise)."""
    within = f" within {timeout:g}s" if timeout is not None else ""
    if what:
        message = (
            f"{label}: no answer to {what} from {url}{within}: is the server busy or down? "
            f"`steward doctor --model {label}:MODEL` tries it with real requests and a longer bound."
        )
    else:
        message = (
            f"{label}: no reply from {url}{within}. Raise timeout_s in [models.{label}] or check the server."
        )
    return ModelError(message, provider=label, retryable=True)


def unreachable_error(label: str, url: str, url_env: str, *, retryable: bool) -> ModelError:
    return ModelError(
        f"{label}: cannot reach {url}: is the server running? Set {url_env} or base_url in [models.{label}].",
        provider=label,
        retryable=retryable,
    )


def status_error(
    label: str,
    status: int,
    detail: str,
    *,
    retries: int,
    key_env: str,
    model: str,
    url: str,
    kind: str | None = None,
    repeated: bool = False,
) -> ModelError:
    """An HTTP error status the provider's own retries (``retries`` of them) could not overcome.

    ``kind`` is the error type the body names; ``repeated``: the server gave the very same error
    to the very same request twice, so it is deterministic whatever its status says.
    """
    invalid = is_invalid_request(status, detail, kind)
    detail = readable(detail).rstrip(". ")
    after = f" after {retries} retries" if retries else ""
    if status == 401:
        message = (
            f"{label}: the API key was rejected (401). Set {key_env} to a valid key "
            f"(or api_key_env in [models.{label}] naming another variable)."
        )
    elif status == 403:
        message = (
            f"{label}: access to model '{model}' was denied (403): {detail}. Check the key's permissions."
        )
    elif status == 404:
        message = (
            f"{label}: model '{model}' was not found at {url}. Check the model name "
            f"(steward run --model {label}:NAME) and base_url in [models.{label}]."
        )
    elif invalid and _OVER_CONTEXT.search(detail):
        message = (
            f"{label}: the request was rejected ({status}): {detail}. It is longer than the model's "
            f"context at {url}: give the server a larger one (llama.cpp: --ctx-size; Ollama: num_ctx), "
            "or set request_token_budget in [limits] below it."
        )
        return ModelError(message, provider=label)
    elif invalid:
        message = (
            f"{label}: the request was rejected ({status}): {detail}. The server at {url} calls the "
            "request invalid, so it was sent once: check its log and version, or try "
            f"`steward doctor --model {label}:{model}` to see what it accepts."
        )
        return ModelError(message, provider=label)
    elif status == 429:
        message = (
            f"{label}: rate limited (429), still after {retries} retries: {detail}. "
            f"Wait and try again, or raise max_retries in [models.{label}]."
        )
    elif repeated:
        message = (
            f"{label}: server error ({status}), the same twice for the same request, so not sent "
            f"again: {detail}. Check the server's log at {url}: it fails on this request."
        )
        return ModelError(message, provider=label)
    elif status == 529:
        message = f"{label}: the API is overloaded (529){after}. Try again later."
    elif status >= 500:
        message = f"{label}: server error ({status}){after}: {detail}. Try again later."
    else:
        message = f"{label}: the request was rejected ({status}): {detail}"
    error = ModelError(message, provider=label, retryable=status in (408, 409, 429) or status >= 500)
    return spent(error, retries)
