"""Secret values that Steward itself hands to processes, as the configuration says.

A token reaches a process without passing through a file of the workspace: an MCP server's
``env`` (often ``${NAME}`` taken from our environment), the variables it gets through
``env_passthrough``, an HTTP server's ``headers``, our variables that ``[sandbox] env``
lets into every command, and the forge token ``[git] token_env`` names (default
``GITHUB_TOKEN``, ``GITEA_TOKEN``), which Steward uses on the host. Whatever that process
prints may carry them, so they are redacted
as the values of secret files are, marked with where they were configured.

The same rules as for a ``.env`` file decide what of a value is secret: all of it under a name
that says so (``*_TOKEN``, ``Authorization``), or taken from one of our variables; the password
of a URL; under a plain name only a token-like value (letters and digits, 16 characters or
more), never a word, host name, path or media type (``LOG_LEVEL=debug`` must not wreck the output).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from steward.safety.secrets.values import _TOKENISH, _URL, _kept, _pieces, _secret_key

if TYPE_CHECKING:
    from steward.config import Config, McpServerConfig

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def configured_secrets(config: Config, environ: Mapping[str, str]) -> dict[str, list[str]]:
    """Where each value is configured (the redaction marker) -> the secret values found there."""
    found: dict[str, list[str]] = {}
    for name, server in config.mcp_servers.items():
        for where, values in _mcp_values(name, server, environ).items():
            found.setdefault(where, []).extend(values)
    for variable, value in environ.items():
        if any(fnmatch.fnmatchcase(variable, pattern) for pattern in config.sandbox.env):
            found.setdefault(f"[sandbox] env {variable}", []).extend(_secret_parts(variable, value, False))
    # steward-forge: the forge token that git_push and create_pull_request use on the host.
    from steward.tools.forge import token_variables

    for variable in token_variables(config.git):
        if environ.get(variable):
            found.setdefault(f"[git] token {variable}", []).extend(
                _secret_parts(variable, environ[variable], True)
            )
    return {where: _split(values) for where, values in found.items() if values}


def _mcp_values(name: str, server: McpServerConfig, environ: Mapping[str, str]) -> dict[str, list[str]]:
    section = f"[mcp_servers.{name}]"
    found: dict[str, list[str]] = {}
    for key, raw in server.env.items():
        found[f"{section} env {key}"] = _secret_parts(key, _expand(raw, environ), _VARIABLE.search(raw))
    for key in server.env_passthrough:
        if key in environ:
            found[f"{section} env {key}"] = _secret_parts(key, environ[key], True)
    for key, raw in server.headers.items():
        secret = key.lower() in _CREDENTIAL_HEADERS or bool(_VARIABLE.search(raw))
        value = _expand(raw, environ)
        # "Bearer TOKEN", "Basic BASE64": the credential is the last word.
        parts = [value, value.split()[-1]] if value.split() else [value]
        found[f"{section} headers {key}"] = [v for p in parts for v in _secret_parts(key, p, secret)]
    for n, raw in enumerate(server.args):
        if _VARIABLE.search(raw):  # a token given on the command line
            found[f"{section} args[{n}]"] = _secret_parts("", _expand(raw, environ), True)
    return found


def _secret_parts(key: str, value: str, taken_from_us: object) -> list[str]:
    if taken_from_us or _secret_key(key):
        return _kept(value, secret_key=True)
    # Under a plain name only a token-like value: settings (`application/json`, `--verbose`,
    # `production`) must stay readable wherever they are printed.
    kept = _kept(value, secret_key=False)
    return kept if _URL.fullmatch(value.strip()) else [v for v in kept if _TOKENISH.fullmatch(v)]


def _expand(value: str, environ: Mapping[str, str]) -> str:
    """``${NAME}`` as the server gets it (an unset one stays as written: that server fails)."""
    return _VARIABLE.sub(lambda m: environ.get(m.group(1), m.group(0)), value)


def _split(values: list[str]) -> list[str]:
    return list(dict.fromkeys(piece for value in values for piece in _pieces(value)))
