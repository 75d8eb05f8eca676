"""The wrapper that puts the guard and the policy in front of any toolset.

Built-in tools, user tools and MCP servers all pass through it, so there is one safety model
for every tool surface.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

from steward.atomic import write_atomic
from steward.errors import ApprovalRequired, ToolError
from steward.models.base import ToolSpec
from steward.safety.policy.approvals import call_hash
from steward.safety.policy.rules import WRITE_TOOLS, Policy
from steward.safety.types import GuardVerdict
from steward.state_dir import make_dir
from steward.tools.base import ToolContext, ToolResult, Toolset, WrapperToolset


class Judge(Protocol):
    """The guard's interface as the wrapper needs it."""

    def check(self, tool: str, arguments: Mapping[str, Any], *, workspace: Any) -> GuardVerdict: ...


# steward-forge: (what a human approves, what the approval is bound to) for one proposed call.
Previewer = Callable[[str, Mapping[str, Any], ToolContext], Awaitable[tuple[str, str] | None]]


class GuardedToolset(WrapperToolset):
    """Every call is judged by the guard, then decided by the policy: run, refuse, or ask.

    ``previews`` (by tool name) say what a call about to be asked would do, made when it is
    asked and again when the approved call runs (``git_push``: the commits that would leave).
    The text is shown with the approval; the binding joins the approval's hash, so if what the
    call would do changes in between (the branch moved), it is asked about again.
    """

    def __init__(
        self,
        wrapped: Toolset,
        *,
        guard: Judge,
        policy: Policy,
        previews: Mapping[str, Previewer] | None = None,
    ) -> None:
        super().__init__(wrapped)
        self.guard = guard
        self.policy = policy
        self.previews = dict(previews or {})

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        tools = await self.wrapped.get_tools(ctx)
        if self.policy.write:
            return tools
        return [t for t in tools if t.name not in WRITE_TOOLS]  # the write switch: not even offered

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        spec = await self.wrapped.spec_of(name, ctx)
        fingerprint = spec.fingerprint if spec is not None else ""
        pins = ToolPins.of(ctx.workspace) if fingerprint else None
        changed = pins.changed(name, spec) if pins is not None and spec is not None else ""
        verdict = self.guard.check(name, arguments, workspace=ctx.workspace)
        if verdict.invalid:  # not a judgement to ask anyone about: the model fixes its call
            return ToolResult(
                f"Invalid arguments for {name}: {verdict.invalid}. Fix the arguments and call again.",
                is_error=True,
            )
        # A tool that is not listed now but belongs to a toolset (a server that is down) could
        # come back as anything: it asks, as an untrusted MCP tool would.
        default = spec.default_action if spec else ("ask" if self.wrapped.claims(name) else "allow")
        decision = self.policy.decide(name, arguments, verdict, default=default, changed=changed)
        if decision.action == "deny":
            return ToolResult(
                f"Not run: {decision.reason}. Choose another way to reach the goal.",
                is_error=True,
                notes=(("blocked", f"{name}: {decision.reason}"),),
            )
        noted: tuple[tuple[str, str], ...] = ()
        if decision.action == "ask":
            # The approval is bound to what the tool says it does: if the server changes the
            # description between the question and the answer, the answer no longer applies.
            shown = await self._preview(name, arguments, ctx) if spec is not None else ("", "")
            if isinstance(shown, ToolResult):
                return shown
            detail, binding = shown
            digest = call_hash(name, arguments, f"{fingerprint}\n{binding}" if binding else fingerprint)
            if digest != ctx.approved:  # set by the loop in the context of the approved call only
                raise ApprovalRequired(
                    tool=name,
                    arguments=dict(arguments),
                    call_hash=digest,
                    reason=decision.reason,
                    suggestion=str(decision.suggestion) if decision.suggestion and not changed else None,
                    description=detail or (spec.description if spec is not None and spec.origin else ""),
                )
        elif decision.auto:
            noted = (("auto_approved", f"{name}: {decision.reason}"),)
        if pins is not None and spec is not None:
            pins.pin(spec)  # what was approved (or allowed) to run: a later change asks again
        # What the policy decided goes down with this call only; the approval is used up here
        # (one approval, one call), so nothing inside can count it again.
        inner = replace(ctx, allow_network=decision.network, writable=self.policy.write, approved=None)
        result = await self.wrapped.call_tool(name, arguments, inner)
        return replace(result, notes=noted + result.notes) if noted else result

    async def _preview(
        self, name: str, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> tuple[str, str] | ToolResult:
        previewer = self.previews.get(name)
        if previewer is None:
            return "", ""
        try:
            shown = await previewer(name, arguments, ctx)
        except ToolError as exc:  # nothing to ask about (no branch, no remote): the model hears why
            return ToolResult(str(exc), is_error=True)
        return shown or ("", "")


class ToolPins:
    """The descriptions of tools as they were when first allowed to run, per workspace.

    Kept in ``.steward/tool-pins.json``: an MCP server that later changes what a tool says it
    does (a "rug pull") gets that tool asked about again, whatever the rules allow.
    """

    FILE = ".steward/tool-pins.json"
    _cache: ClassVar[dict[Path, ToolPins]] = {}

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pins: dict[str, dict[str, str]] | None = None
        self._mtime: float | None = None

    @classmethod
    def of(cls, workspace: Path) -> ToolPins:
        path = workspace / cls.FILE
        found = cls._cache.get(path)
        if found is None:
            found = cls._cache[path] = ToolPins(path)
        return found

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            mtime = None
        if self._pins is None or mtime != self._mtime:
            self._mtime = mtime
            try:
                data = json.loads(self.path.read_text(encoding="utf-8")) if mtime is not None else {}
            except (OSError, ValueError):
                data = {}  # unreadable pins pin nothing: tools are asked about as if new
            self._pins = (
                {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}
            )
        return self._pins

    def changed(self, name: str, spec: ToolSpec) -> str:
        pinned = self._load().get(name)
        if pinned is None or pinned.get("fingerprint") == spec.fingerprint:
            return ""
        before = " ".join(str(pinned.get("description", "")).split())[:300]
        return (
            f"the tool's description or arguments changed since it was approved (before: {before!r}); "
            "read the new description before approving"
        )

    def pin(self, spec: ToolSpec) -> None:
        pins = self._load()
        current = pins.get(spec.name)
        if current is not None and current.get("fingerprint") == spec.fingerprint:
            return
        pins[spec.name] = {"fingerprint": spec.fingerprint, "description": spec.description[:2000]}
        try:
            make_dir(self.path.parent)
            write_atomic(self.path, json.dumps(pins, indent=1, sort_keys=True))
            self._mtime = self.path.stat().st_mtime
        except OSError:
            pass  # a read-only workspace: pins then last for this process only
