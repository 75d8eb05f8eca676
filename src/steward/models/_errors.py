"""The one wording of provider failures: one line each, naming the fix.

Both providers map their SDK's exceptions onto these, so a bad key, an unknown model or an
unreachable server reads the same whichever provider is behind it.
"""

from __future__ import annotations

from steward.errors import ModelError


def timeout_error(label: str, url: str, timeout: float | None) -> ModelError:
    within = f" within {timeout:g}s" if timeout is not None else ""
    return ModelError(
        f"{label}: no reply from {url}{within}. Raise timeout_s in [models.{label}] or check the server.",
        provider=label,
        retryable=True,
    )


def unreachable_error(label: str, url: str, url_env: str, *, retryable: bool) -> ModelError:
    return ModelError(
        f"{label}: cannot reach {url}: is the server running? Set {url_env} or base_url in [models.{label}].",
        provider=label,
        retryable=retryable,
    )


def status_error(
    label: str, status: int, detail: str, *, retries: int, key_env: str, model: str, url: str
) -> ModelError:
    """An HTTP error status the provider's own retries could not overcome."""
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
    elif status == 429:
        message = (
            f"{label}: rate limited (429), still after {retries} retries: {detail}. "
            f"Wait and try again, or raise max_retries in [models.{label}]."
        )
    elif status == 529:
        message = f"{label}: the API is overloaded (529) after {retries} retries. Try again later."
    elif status >= 500:
        message = f"{label}: server error ({status}) after {retries} retries: {detail}. Try again later."
    else:
        message = f"{label}: the request was rejected ({status}): {detail}"
    return ModelError(message, provider=label, retryable=status in (408, 409, 429) or status >= 500)
