"""Personas (seed 003): who an agent is, what it may use, and how it is limited.

A persona file ``personas/NAME.toml`` (in the workspace, else in the user's config directory
``~/.config/steward/personas/``, else one of the personas shipped with Steward) holds::

    role = "coder"                    # jobs are addressed to a role
    goal = "Make the change asked for, with tests, and leave the tree green."
    backstory = "A careful engineer who reads before writing."
    instructions = "Run the tests before you end."
    tools = ["read_file", "edit_file", "bash", "github__*"]   # globs; omitted: every tool
    model = "openai:gpt-4o-mini"      # optional: else the configured one
    prompt = "compact"                # optional: like steward.toml's prompt (full or compact)
    [policy]                          # optional: like steward.toml's [policy] (rules add up)
    deny = ["bash(git push*)"]
    [limits]                          # optional: like steward.toml's [limits]
    max_steps = 80
    [budget]                          # optional: like steward.toml's [budget]
    tokens = 200000
    [output_schema]                   # optional: the JSON Schema its answers must match
    type = "object"                   # (or output_schema = "answer.schema.json", next to the file)

Its words become the static prompt; its tool allowlist is a wrapper toolset (a tool it does not
list is neither offered nor run); its model, policy and limits are one more configuration layer,
above the files and below the environment and the command line. A mistake in the file is
reported with the file, the key and what is allowed. Persona files in the workspace are
protected like ``steward.toml``: an agent cannot widen its own tools or policy by editing them.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steward.errors import ConfigError
from steward.safety.protected import PERSONAS_DIR  # protected in the workspace like steward.toml

SHIPPED = Path(__file__).parent
"""The personas that come with Steward (``coder``, ``reviewer``, ``researcher``): this folder."""

ALWAYS_ALLOWED = frozenset({"recall_output"})
"""Tools every persona keeps: the way back to an output elided from its own context."""

_TEXT_KEYS = ("role", "goal", "backstory", "instructions")
_KEYS = ("name", *_TEXT_KEYS, "tools", "model", "prompt", "policy", "limits", "budget", "output_schema")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(slots=True, frozen=True)
class Persona:
    name: str
    role: str = ""
    goal: str = ""
    backstory: str = ""
    instructions: str = ""
    #: Tool name globs the persona may use; None: every tool.
    tools: tuple[str, ...] | None = None
    model: str | None = None
    #: ``prompt`` as written ("full" or "compact"; checked as steward.toml's); None: the configured one.
    prompt_style: str | None = None
    #: ``[policy]`` and ``[limits]`` as written (checked against the configuration's sections).
    policy: Mapping[str, Any] = field(default_factory=dict)
    limits: Mapping[str, Any] = field(default_factory=dict)
    budget: Mapping[str, Any] = field(default_factory=dict)  # ``[budget]`` as written
    #: Where it was read from (None: made in Python).
    source: Path | None = None
    #: The JSON Schema its runs' answers must match by default (``steward.answers``); None: any text.
    output_schema: Mapping[str, Any] | None = None
    #: More allowlists a tool must also pass: those of the jobs that delegated to this one.
    within: tuple[tuple[str, ...], ...] = ()

    def prompt(self) -> str:
        """The persona's words, as they go into the static prompt."""
        parts = []
        if self.role:
            parts.append(f"Your role: {self.role}.")
        if self.goal:
            parts.append(f"Your goal: {self.goal}")
        if self.backstory:
            parts.append(f"Background: {self.backstory}")
        if self.instructions:
            parts.append(self.instructions)
        return "\n".join(parts)

    def allows(self, tool: str) -> bool:
        """Whether the persona may see and call ``tool``."""
        if tool in ALWAYS_ALLOWED:
            return True
        lists = (*self.within, self.tools) if self.tools is not None else self.within
        return all(any(fnmatch.fnmatchcase(tool, pattern) for pattern in patterns) for patterns in lists)

    def layer(self) -> dict[str, Any]:
        """The persona's part of the configuration: its model, prompt style, policy and limits."""
        layer: dict[str, Any] = {}
        if self.model:
            layer["model"] = self.model
        if self.prompt_style:
            layer["prompt"] = self.prompt_style
        if self.policy:
            layer["policy"] = dict(self.policy)
        if self.limits:
            layer["limits"] = dict(self.limits)
        if self.budget:
            layer["budget"] = dict(self.budget)
        return layer


def persona_dirs(workspace: Path) -> list[Path]:
    """Where persona files are looked for, first match wins: the workspace, the user, Steward."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [workspace / PERSONAS_DIR, Path(base) / "steward" / PERSONAS_DIR, SHIPPED]


def find_persona(name: str, workspace: Path) -> Persona:
    """The persona called ``name`` for ``workspace``, or a ``ConfigError`` naming those there are."""
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{name!r} is not a persona name: use letters, digits, '-', '_' or '.' (e.g. coder)."
        )
    for directory in persona_dirs(workspace):
        path = directory / f"{name}.toml"
        if path.is_file():
            return read_persona(path)
    known = ", ".join(sorted(list_personas(workspace))) or "(none)"
    raise ConfigError(
        f"no persona {name!r}: put it in {workspace / PERSONAS_DIR / (name + '.toml')} "
        f"(personas here: {known}; `steward personas list` shows where each comes from)."
    )


def list_personas(workspace: Path) -> dict[str, Path]:
    """Every persona available in ``workspace``, by name, with the file that defines it."""
    found: dict[str, Path] = {}
    for directory in persona_dirs(workspace):
        try:
            files = sorted(directory.glob("*.toml"))
        except OSError:
            continue
        for path in files:
            if _NAME.fullmatch(path.stem):
                found.setdefault(path.stem, path)
    return found


def read_persona(path: Path) -> Persona:
    """Read and check a persona file; every mistake names the file, the key and what is allowed."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML (UTF-8): {exc}. Fix the file.") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}). Fix its permissions.") from None
    return persona_from_data(data, name=path.stem, source=path)


def persona_from_data(data: Mapping[str, Any], *, name: str, source: Path | None = None) -> Persona:
    """A persona from its keys (a file's, or a Python mapping), checked as a file is."""
    where = str(source) if source is not None else f"persona {name!r}"
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}' (allowed here: {', '.join(_KEYS)})")
    text: dict[str, str] = {}
    for key in ("name", *_TEXT_KEYS, "model", "prompt"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}: '{key}' must be a string (got {value!r})")
        if value is not None:
            text[key] = value
    tools = data.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, str) and t for t in tools)):
        raise ConfigError(
            f'{where}: \'tools\' must be a list of tool names or globs, e.g. ["read_file", "github__*"] '
            f"(got {tools!r})"
        )
    sections = {key: data.get(key) or {} for key in ("policy", "limits", "budget")}
    for key, value in sections.items():
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: '{key}' must be a table, e.g. [{key}] (got {value!r})")
    _check_sections({**sections, "prompt": text.get("prompt")}, where)
    model = text.get("model")
    if model and model.startswith("scripted:") and source is not None:
        script = Path(model.removeprefix("scripted:"))  # found next to the persona file
        model = f"scripted:{source.parent / script}" if not script.is_absolute() else model
    return Persona(
        name=text.get("name", name),
        role=text.get("role", ""),
        goal=text.get("goal", ""),
        backstory=text.get("backstory", ""),
        instructions=text.get("instructions", ""),
        tools=tuple(tools) if tools is not None else None,
        model=model,
        prompt_style=text.get("prompt"),
        policy=dict(sections["policy"]),
        limits=dict(sections["limits"]),
        budget=dict(sections["budget"]),
        source=source,
        output_schema=_output_schema(data.get("output_schema"), where, source),
    )


def _output_schema(value: Any, where: str, source: Path | None) -> dict[str, Any] | None:
    """``output_schema``: the JSON Schema inline (a table), or a JSON file next to the persona file."""
    from steward.answers import check_schema, load_schema_file

    if value is None:
        return None
    if isinstance(value, Mapping):
        return check_schema(value, f"{where}: 'output_schema'")
    if isinstance(value, str) and value.endswith(".json"):
        path = Path(value)
        if not path.is_absolute() and source is not None:
            path = source.parent / path
        try:
            return load_schema_file(path)
        except ConfigError as exc:
            raise ConfigError(f"{where}: 'output_schema': {exc}") from None
    raise ConfigError(
        f"{where}: 'output_schema' must be a table holding the JSON Schema, e.g. [output_schema] "
        f'type = "object", or the path of a .json file next to the persona, e.g. "answer.schema.json" '
        f"(got {value!r})"
    )


def _check_sections(sections: Mapping[str, Any], where: str) -> None:
    """``[policy]``, ``[limits]`` and ``prompt`` must be valid as they would be in steward.toml."""
    from steward.config import validate_layer

    validate_layer({key: value for key, value in sections.items() if value}, where)
