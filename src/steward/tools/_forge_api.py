"""Opening a pull request through GitHub's or Gitea's (Forgejo's) REST API.

Both take ``POST {api}/repos/{owner}/{repo}/pulls`` with ``title``, ``body``, ``head`` and
``base`` and answer 201 with ``number`` and ``html_url``. They differ in the token header
(``Bearer`` on GitHub, ``token`` on Gitea) and in drafts: GitHub has a ``draft`` field, Gitea
marks a work-in-progress pull request by a ``WIP:`` title prefix. Without a base, the
repository's ``default_branch`` (``GET {api}/repos/{owner}/{repo}``) is the base.

Every error names what to do; none shows the token (the messages quote only the forge's own
``message`` field, cut short).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from steward.errors import ToolError

if TYPE_CHECKING:
    import httpx

    from steward.tools.forge import Credential

TIMEOUT_S = 30.0
MAX_MESSAGE = 400


def _headers(forge: Literal["github", "gitea"], credential: Credential) -> dict[str, str]:
    if forge == "github":
        return {
            "Authorization": f"Bearer {credential.token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
    return {"Authorization": f"token {credential.token}", "Accept": "application/json"}


async def open_pull_request(
    forge: Literal["github", "gitea"],
    api: str,
    owner: str,
    repo: str,
    credential: Credential,
    *,
    title: str,
    body: str,
    head: str,
    base: str | None,
    draft: bool,
) -> tuple[int, str]:
    """Open the pull request; its number and web URL."""
    import httpx

    where = f"{owner}/{repo}"
    async with httpx.AsyncClient(
        headers=_headers(forge, credential), timeout=TIMEOUT_S, follow_redirects=False
    ) as client:
        if not base:
            reply = await _send(client, "GET", f"{api}/repos/{owner}/{repo}", None, where, credential, api)
            base = str(_json(reply).get("default_branch") or "")
            if not base:
                raise ToolError(f"{where} has no default branch the forge names: call again with base=...")
        payload: dict[str, Any] = {"title": title, "body": body, "head": head, "base": base}
        if forge == "github":
            payload["draft"] = draft
        elif draft and not title.startswith("WIP:"):
            payload["title"] = f"WIP: {title}"
        reply = await _send(
            client, "POST", f"{api}/repos/{owner}/{repo}/pulls", payload, where, credential, api
        )
    data = _json(reply)
    number, url = data.get("number"), data.get("html_url")
    if not isinstance(number, int) or not isinstance(url, str):
        raise ToolError(f"The forge at {api} answered without a pull request number and URL; tell the user.")
    return number, url


async def _send(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    payload: dict[str, Any] | None,
    where: str,
    credential: Credential,
    api: str,
) -> httpx.Response:
    import httpx

    try:
        reply = await client.request(method, url, json=payload)
    except httpx.TimeoutException:
        raise ToolError(
            f"The forge at {api} did not answer within {TIMEOUT_S:.0f} s; try again later."
        ) from None
    except httpx.HTTPError as exc:
        raise ToolError(
            f"Cannot reach the forge at {api} ({type(exc).__name__}); check [git] api_url and the network."
        ) from None
    if reply.status_code < 300:
        return reply
    raise ToolError(_explain(reply, where, credential, api))


def _explain(reply: httpx.Response, where: str, credential: Credential, api: str) -> str:
    said = _message(reply)
    status = reply.status_code
    if status == 401:
        return (
            f"The forge refused the token (401{said}): {credential.variable} holds no valid token for {api}. "
            f"Tell the user to renew it; do not retry."
        )
    if status == 403:
        return (
            f"The token in {credential.variable} may not open pull requests on {where} (403{said}). Tell the "
            "user to give it pull-request write access (GitHub: Pull requests: write; Gitea: "
            "write:repository)."
        )
    if status == 404:
        return (
            f"{where} was not found at {api} (404{said}): check [git] api_url and the remote's URL, and "
            f"that the token in {credential.variable} can see the repository."
        )
    if status in (409, 422):
        return (
            f"The forge rejected the pull request ({status}{said}): a pull request for this branch may "
            "already exist, or the base or head branch is wrong (the head must be pushed and differ from "
            "the base). Fix what it says and call again."
        )
    return f"The forge answered {status}{said}; tell the user if it persists."


def _message(reply: httpx.Response) -> str:
    try:
        data = reply.json()
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    parts = [str(data.get("message") or "")]
    errors = data.get("errors")
    if isinstance(errors, list):
        parts += [
            str(e.get("message") or e.get("code") or "") if isinstance(e, dict) else str(e)
            for e in errors[:5]
        ]
    text = "; ".join(p for p in parts if p)
    return f": {text[:MAX_MESSAGE]}" if text else ""


def _json(reply: httpx.Response) -> dict[str, Any]:
    try:
        data = reply.json()
    except ValueError:
        raise ToolError("The forge answered with something that is not JSON; check [git] api_url.") from None
    if not isinstance(data, dict):
        raise ToolError("The forge answered with unexpected JSON; check [git] api_url.")
    return data
