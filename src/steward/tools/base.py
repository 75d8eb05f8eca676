"""Tools as typed functions, and toolsets that group and wrap them.

``@tool`` turns a function into a ``Tool``: the JSON schema of its arguments comes from the
signature and the docstring through pydantic's public API, and a call with bad arguments
returns a ``ToolResult`` the model can act on instead of raising.

A ``Toolset`` offers tools (``get_tools``) and runs them (``call_tool``). Cross-cutting
behaviour (prefixes, filters, approval) is a ``WrapperToolset``, never a branch in the loop.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, get_type_hints, overload

from steward.errors import ConfigError, ToolError
from steward.models.base import ToolSpec
from steward.secret_paths import DEFAULT_SECRET_FILES

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

_State = TypeVar("_State")


@dataclass(slots=True)
class ToolSettings:
    """Limits the built-in tools apply; the loop fills them from the configuration."""

    bash_timeout_s: float = 120.0
    output_cap_chars: int = 30_000
    read_cap_chars: int = 50_000
    #: Domains the egress proxy and ``fetch_url`` may reach (``*.`` wildcards); empty: none.
    allowed_domains: tuple[str, ...] = ()
    #: File-name globs of secret files (``steward.safety.secrets.values``).
    secret_files: tuple[str, ...] = DEFAULT_SECRET_FILES


class CommandSandbox(Protocol):
    """Runs commands inside an OS sandbox (``steward.safety.sandbox.bubblewrap`` implements it).

    ``command`` yields the argv to execute instead of ``argv``; it raises ``ToolError`` naming
    the fix when the sandbox cannot start. Leaving the context releases what it set up.
    """

    def command(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        network: bool,
        writable: bool,
        on_connection: Callable[[Any], None] | None = None,
        binds: Sequence[tuple[Path, str]] = (),
    ) -> AbstractAsyncContextManager[list[str]]: ...


class ProgramTools(Protocol):
    """The run's tools as a program running inside one call reaches them (``execute_code``)."""

    #: How many calls the program may make.
    limit: int

    @property
    def halted(self) -> bool:
        """Whether the program must stop now (a call of it waits for a human's approval)."""
        ...

    async def tools(self) -> Sequence[ToolSpec]:
        """The tools the program may call."""
        ...

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """One call, recorded as a call of the run; refusals and failures are results."""
        ...


class RunScopes:
    """The state wrappers keep for one run (the tools discovery found, the rules already given).

    One agent's toolset serves many runs at once, so a wrapper cannot keep a run's state in
    itself. The run's context carries this store instead: a new ``ToolContext`` (a new run)
    starts with an empty one, and the contexts made from it with ``dataclasses.replace`` (each
    call's) share it. So every call of a run sees the same state, no run sees another's, and
    the state goes when the run goes, with nothing to evict or bound. Each wrapper reaches only
    its own state (``ToolContext.scope``), keyed by the wrapper and the run's id: even a context
    made from another run's with ``replace(ctx, run_id=...)`` starts empty.
    """

    __slots__ = ("_states",)

    def __init__(self) -> None:
        self._states: dict[tuple[object, str], object] = {}

    def get(self, owner: object, run_id: str, make: Callable[[], _State]) -> _State:
        key = (owner, run_id)
        state = self._states.get(key)
        if state is None:
            state = self._states.setdefault(key, make())
        return cast("_State", state)


@dataclass(slots=True, frozen=True)
class ToolContext:
    """What a tool may know about the run that called it, and about this one call.

    It never changes: the run's configuration is fixed when the run starts, and what belongs to
    one call is set by making that call's own context with ``dataclasses.replace`` (the loop sets
    ``step`` and ``approved``; the guard passes ``allow_network`` down to the call it allowed).
    """

    workspace: Path
    run_id: str = ""
    #: The step of the call (set per call by the loop).
    step: int = 0
    settings: ToolSettings = field(default_factory=ToolSettings)
    #: Full output of an earlier tool call of this run by call id (elided outputs live here).
    recall: Callable[[str], str | None] | None = None
    #: Where command-running tools must run their commands; None runs them directly (only
    #: when the user turned the sandbox off).
    sandbox: CommandSandbox | None = None
    #: Whether this call may use the network (the policy decides per call; the guard sets it).
    allow_network: bool = False
    #: Whether tools may change the workspace (the write switch).
    writable: bool = True
    #: Why a path may not be written (a protected path such as ``.git/hooks``), or None.
    protected: Callable[[Path], str | None] | None = None
    #: The hash of the call a human approved, in the context of that call only (set by the
    #: loop): one approval is good for one call.
    approved: str | None = None
    #: Whose memories the run sees (``steward.memory.longterm``): the persona's name ("" for
    #: none) and the user (a job's user key, ``[memory] user``, or "local").
    persona: str = ""
    user: str = "local"
    #: The wrappers' state for this run (see ``RunScopes``); shared by every call's context.
    scopes: RunScopes = field(default_factory=RunScopes, repr=False, compare=False)
    #: The run's tools for a program (``execute_code``), each call through the whole guarded
    #: toolset; set by ``steward.tools.code.CodeToolset`` for that call only.
    program_tools: ProgramTools | None = field(default=None, repr=False, compare=False)
    #: Told of each call a program makes from inside this call, as it is made (the loop records
    #: it at once, so a program cut short leaves its calls on the record); set by the loop.
    on_call: Callable[[NestedCall], None] | None = field(default=None, repr=False, compare=False)

    def scope(self, owner: object, make: Callable[[], _State]) -> _State:
        """``owner``'s own state for this run, made by ``make`` on first use."""
        return self.scopes.get(owner, self.run_id, make)


@dataclass(slots=True, frozen=True)
class ToolResult:
    """The outcome of one tool call, as the model will read it."""

    content: str
    is_error: bool = False
    #: The error's kind when the tool knows it better than a guess from the text (e.g.
    #: "mcp_tool_error" for a tool's own failure, "mcp_protocol" for a broken conversation).
    category: str | None = None
    #: How long the call took, when the toolset knows better than the caller's own clock
    #: (a result taken from a run's log keeps the duration it was recorded with).
    duration_ms: float | None = None
    #: What the tool and the wrappers noted on the way (kind, message), in order: egress
    #: connections, a checkpoint taken, a call blocked. The loop reports each as a signal event.
    notes: tuple[tuple[str, str], ...] = ()
    #: The tool calls a program made from inside this call (``execute_code``), each recorded
    #: as its own call of the run, after the notes (``steward.tools.code``).
    nested: tuple[NestedCall, ...] = ()


@dataclass(slots=True, frozen=True)
class NestedCall:
    """One call a program made through its channel: recorded with the id ``<parent>.<n>``."""

    n: int
    tool: str
    arguments: Mapping[str, Any]
    output: str
    is_error: bool
    duration_ms: float
    category: str | None = None


# --- @tool ------------------------------------------------------------------------------

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
# Sections that are for the programmer, not the model: they end the description.
_OTHER_SECTION = re.compile(r"^(Returns?|Raises|Yields|Examples?|Notes?|See Also|Warnings?):\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {arg: description})."""
    if not doc:
        return "", {}
    import inspect

    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    args: dict[str, str] = {}
    current: str | None = None
    in_args = False
    skipping = False
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args, skipping = True, False
            continue
        if _OTHER_SECTION.match(line):
            in_args, skipping = False, True
            continue
        if skipping:
            continue
        if in_args:
            match = _ARG_LINE.match(line)
            if match and (not line.startswith("        ") or current is None):
                current = match.group(1).lstrip("*")
                args[current] = match.group(3).strip()
            elif current is not None and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
            continue
        description.append(line)
    return _unwrap("\n".join(description).strip()), args


def _unwrap(text: str) -> str:
    """Join hard-wrapped lines inside paragraphs; keep blank lines and list items."""
    paragraphs = []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        out: list[str] = []
        for line in lines:
            stripped = line.strip()
            if out and stripped and not stripped.startswith(("-", "*", "|")) and not line.startswith("    "):
                out[-1] = f"{out[-1]} {stripped}"
            else:
                out.append(line.rstrip())
        paragraphs.append("\n".join(out))
    return "\n\n".join(paragraphs)


def _strip_titles(schema: Any) -> Any:
    """Remove pydantic's generated ``title`` keywords; they cost tokens and say nothing."""
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs") and isinstance(value, dict):
                out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
            else:
                out[key] = _strip_titles(value)
        return out
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    return schema


def _parameter_hints(function: Callable[..., Any]) -> dict[str, Any]:
    """Resolve the parameters' annotations; the return annotation is not needed (and may name a
    type local to the caller, which cannot be resolved later)."""

    class Parameters:
        __annotations__ = {k: v for k, v in getattr(function, "__annotations__", {}).items() if k != "return"}

    namespace = getattr(function, "__globals__", None)
    try:
        return get_type_hints(Parameters, globalns=namespace, include_extras=True)
    except NameError as exc:
        raise TypeError(
            f"@tool {function.__name__}: cannot resolve a parameter annotation ({exc}); define the type at "
            "module level or import it where the tool is defined."
        ) from None


def format_validation_error(tool_name: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(part) for part in err["loc"]) or "(arguments)"
        got = err.get("input")
        shown = "" if err["type"] == "missing" else f" (got {json.dumps(got, default=str)[:80]})"
        problems.append(f"{where}: {err['msg']}{shown}")
    return (
        f"Invalid arguments for {tool_name}: " + "; ".join(problems) + ". Fix the arguments and call again."
    )


class Tool:
    """A typed function the model can call."""

    __slots__ = ("_args_model", "_context_param", "_fields", "_invalid", "_is_async", "function", "spec")

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        # pydantic and inspect are imported here, not at module level: `import steward` stays fast.
        import inspect

        from pydantic import ConfigDict, Field, ValidationError, create_model

        self._invalid = ValidationError
        self.function = function
        self._is_async = inspect.iscoroutinefunction(function)
        hints = _parameter_hints(function)
        doc_description, arg_docs = _parse_docstring(function.__doc__)
        fields: dict[str, Any] = {}
        self._context_param: str | None = None
        for param in inspect.signature(function).parameters.values():
            annotation = hints.get(param.name, Any)
            if annotation is ToolContext:
                self._context_param = param.name
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"@tool {function.__name__}: *args and **kwargs are not supported")
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (annotation, Field(default, description=arg_docs.get(param.name)))
        self._fields = tuple(fields)
        tool_name = name or function.__name__
        self._args_model: type[BaseModel] = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        schema = _strip_titles(self._args_model.model_json_schema())
        schema.pop("additionalProperties", None)
        self.spec = ToolSpec(
            name=tool_name,
            description=description or doc_description or tool_name,
            parameters=schema,
        )

    @property
    def name(self) -> str:
        return self.spec.name

    async def call(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Validate ``arguments`` and run the function; failures become error results."""
        try:
            parsed = self._args_model.model_validate(arguments)
        except self._invalid as exc:
            return ToolResult(format_validation_error(self.name, exc), is_error=True)
        kwargs = {name: getattr(parsed, name) for name in self._fields}
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        try:
            if self._is_async:
                value = await self.function(**kwargs)
            else:
                # Plain functions may block (file I/O, CPU); keep the event loop free.
                import asyncio

                value = await asyncio.to_thread(self.function, **kwargs)
        except ToolError as exc:
            return ToolResult(str(exc), is_error=True)
        except Exception as exc:  # a tool bug must not end the run: the model sees it
            return ToolResult(f"{self.name} failed: {type(exc).__name__}: {exc}", is_error=True)
        return value if isinstance(value, ToolResult) else ToolResult(_to_text(value))


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    from pydantic_core import to_jsonable_python

    # Models, dataclasses, enums, dates and paths become JSON, not their repr.
    return json.dumps(to_jsonable_python(value, fallback=str), ensure_ascii=False)


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a typed function a tool: ``@tool`` or ``@tool(name=..., description=...)``.

    A parameter annotated ``ToolContext`` receives the run's context and is not shown to
    the model. Raise ``ToolError`` to return a message to the model as a failed result.
    """
    if function is not None:
        return Tool(function, name=name, description=description)

    def decorate(fn: Callable[..., Any]) -> Tool:
        return Tool(fn, name=name, description=description)

    return decorate


# --- toolsets ---------------------------------------------------------------------------


class Toolset(ABC):
    """A group of tools: what they are (``get_tools``) and how to run one (``call_tool``)."""

    @abstractmethod
    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        """The tools offered now (may change between calls, e.g. an MCP server's list)."""

    @abstractmethod
    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Run one tool; failures are returned as error results, not raised."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release what the toolset holds (processes, connections)."""

    def claims(self, name: str) -> bool:
        """Whether ``name`` is this toolset's even when it is not offered now (an MCP server's
        tool while the server is down): the call is then routed here, to explain or restart."""
        return False

    async def spec_of(self, name: str, ctx: ToolContext) -> ToolSpec | None:
        """The spec of tool ``name`` if this toolset runs it, offered to the model now or not
        (a wrapper may hide tools from the model; the safety checks still need their specs)."""
        return next((s for s in await self.get_tools(ctx) if s.name == name), None)

    def replayed(self, name: str, arguments: Mapping[str, Any], result: ToolResult, ctx: ToolContext) -> None:  # noqa: B027
        """A call's recorded result, taken from the log while a run is rebuilt (the tool does
        not run again). Toolsets that keep per-run state (``ctx.scope``) restore it here."""


def unknown_tool(name: str, available: Iterable[str]) -> ToolResult:
    names = ", ".join(sorted(available)) or "(none)"
    return ToolResult(f"Unknown tool {name!r}. Available tools: {names}.", is_error=True)


class FunctionToolset(Toolset):
    """Tools defined in Python with ``@tool`` (plain functions are wrapped on the way in)."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.add(item if isinstance(item, Tool) else Tool(item))

    def add(self, item: Tool) -> None:
        if item.name in self._tools:
            raise ConfigError(
                f"Two tools are named {item.name!r}; give one another name with @tool(name=...)."
            )
        self._tools[item.name] = item
        self._specs = tuple(t.spec for t in self._tools.values())

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        return self._specs if self._tools else ()

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        found = self._tools.get(name)
        if found is None:
            return unknown_tool(name, self._tools)
        return await found.call(arguments, ctx)


class CombinedToolset(Toolset):
    """Several toolsets offered as one; a name defined twice is an error, never shadowed."""

    def __init__(self, toolsets: Iterable[Toolset]) -> None:
        self.toolsets = tuple(toolsets)
        self._owner: dict[str, Toolset] = {}
        self._parts: list[Sequence[ToolSpec]] = []
        self._specs: Sequence[ToolSpec] = ()

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        parts = [await toolset.get_tools(ctx) for toolset in self.toolsets]
        if (
            self._owner
            and len(parts) == len(self._parts)
            and all(a is b for a, b in zip(parts, self._parts, strict=True))
        ):
            return self._specs  # nothing changed: keep the same list (cheap, and cache-friendly)
        specs: list[ToolSpec] = []
        owner: dict[str, Toolset] = {}
        for toolset, offered in zip(self.toolsets, parts, strict=True):
            for spec in offered:
                if spec.name in owner:
                    raise ConfigError(
                        f"Tool {spec.name!r} is offered by two toolsets; rename or prefix one of them."
                    )
                owner[spec.name] = toolset
                specs.append(spec)
        self._owner, self._parts, self._specs = owner, parts, specs
        return specs

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        if not self._owner:
            await self.get_tools(ctx)
        toolset = self._owner.get(name) or next((t for t in self.toolsets if t.claims(name)), None)
        if toolset is None:
            return unknown_tool(name, self._owner)
        return await toolset.call_tool(name, arguments, ctx)

    def claims(self, name: str) -> bool:
        return any(t.claims(name) for t in self.toolsets)

    async def spec_of(self, name: str, ctx: ToolContext) -> ToolSpec | None:
        if not self._owner:
            await self.get_tools(ctx)
        toolset = self._owner.get(name)
        return await toolset.spec_of(name, ctx) if toolset is not None else None

    def replayed(self, name: str, arguments: Mapping[str, Any], result: ToolResult, ctx: ToolContext) -> None:
        for toolset in self.toolsets:  # the owner may not be known yet while rebuilding
            toolset.replayed(name, arguments, result, ctx)

    async def aclose(self) -> None:
        for toolset in self.toolsets:
            await toolset.aclose()


class WrapperToolset(Toolset):
    """Delegates everything to ``wrapped``; subclasses override what they change."""

    def __init__(self, wrapped: Toolset) -> None:
        self.wrapped = wrapped

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        return await self.wrapped.get_tools(ctx)

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        return await self.wrapped.call_tool(name, arguments, ctx)

    async def aclose(self) -> None:
        await self.wrapped.aclose()

    async def spec_of(self, name: str, ctx: ToolContext) -> ToolSpec | None:
        return await self.wrapped.spec_of(name, ctx)

    def claims(self, name: str) -> bool:
        return self.wrapped.claims(name)

    def replayed(self, name: str, arguments: Mapping[str, Any], result: ToolResult, ctx: ToolContext) -> None:
        self.wrapped.replayed(name, arguments, result, ctx)


class PrefixedToolset(WrapperToolset):
    """Offers the wrapped tools as ``PREFIX__name`` (how MCP servers' tools are named)."""

    def __init__(self, wrapped: Toolset, prefix: str) -> None:
        super().__init__(wrapped)
        self.prefix = f"{prefix}__"

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        from dataclasses import replace

        return [replace(s, name=self.prefix + s.name) for s in await self.wrapped.get_tools(ctx)]

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        if not name.startswith(self.prefix):
            return unknown_tool(name, [])
        return await self.wrapped.call_tool(name.removeprefix(self.prefix), arguments, ctx)

    async def spec_of(self, name: str, ctx: ToolContext) -> ToolSpec | None:
        if not name.startswith(self.prefix):
            return None
        from dataclasses import replace

        spec = await self.wrapped.spec_of(name.removeprefix(self.prefix), ctx)
        return replace(spec, name=name) if spec is not None else None

    def replayed(self, name: str, arguments: Mapping[str, Any], result: ToolResult, ctx: ToolContext) -> None:
        if name.startswith(self.prefix):
            self.wrapped.replayed(name.removeprefix(self.prefix), arguments, result, ctx)


class FilteredToolset(WrapperToolset):
    """Offers only the tools ``allowed`` accepts (a persona's allowlist, a write switch)."""

    def __init__(self, wrapped: Toolset, allowed: Callable[[str], bool]) -> None:
        super().__init__(wrapped)
        self.allowed = allowed

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        return [s for s in await self.wrapped.get_tools(ctx) if self.allowed(s.name)]

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        if not self.allowed(name):
            return ToolResult(f"Tool {name!r} is not available to this agent.", is_error=True)
        return await self.wrapped.call_tool(name, arguments, ctx)
