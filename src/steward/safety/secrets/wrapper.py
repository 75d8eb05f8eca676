"""The wrapper that keeps secret values out of every tool output (``steward.safety.secrets.values``).

It sits outermost, around the guarded toolset, so that whatever any tool or wrapper returns,
the result's notes included, is redacted before the loop shows it to the model or records it
in the run's log. It lives apart from ``secrets`` because the tools' base module imports
that one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from steward.errors import ApprovalRequired
from steward.safety.secrets.values import Redactor, SecretWatch
from steward.tools.base import ToolContext, ToolResult, Toolset, WrapperToolset

MAX_WATCHED_WORKSPACES = 64
"""Workspaces whose watch is kept (one agent serves runs in several); the oldest is dropped."""


class RedactingToolset(WrapperToolset):
    """Every result's content (and every note) with the secret files' values redacted, by value:
    copies, renames and archives of a secret file are caught as well as the file itself.

    ``watch_for`` makes the watch of one workspace (runs of one agent may work in different
    ones); it is called once per workspace.
    """

    def __init__(self, wrapped: Toolset, watch_for: Callable[[Path], SecretWatch]) -> None:
        super().__init__(wrapped)
        self.watch_for = watch_for
        self._watches: OrderedDict[Path, SecretWatch] = OrderedDict()
        self._lock = threading.Lock()  # runs of one agent look their watches up from worker threads

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            result = await self.wrapped.call_tool(name, arguments, ctx)
        except ApprovalRequired:
            raise
        except Exception as exc:  # its message may quote the output; the loop would show it as is
            result = ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
        # The watch may list the workspace and read changed files: off the event loop, unless
        # it has nothing to look at now (no secret files, no rescan due).
        redactor = self._watch(ctx.workspace).settled()
        if redactor is None:
            redactor = await asyncio.to_thread(self._redactor, ctx.workspace)
        notes = tuple((kind, redactor.redact(message)) for kind, message in result.notes)
        redacted = redactor.redact(result.content)
        if redacted == result.content and notes == result.notes:
            return result
        return dataclasses.replace(result, content=redacted, notes=notes)

    def _watch(self, workspace: Path) -> SecretWatch:
        with self._lock:
            watch = self._watches.get(workspace)
            if watch is None:
                watch = self._watches[workspace] = self.watch_for(workspace)
                if len(self._watches) > MAX_WATCHED_WORKSPACES:
                    self._watches.popitem(last=False)
            else:
                self._watches.move_to_end(workspace)
            return watch

    def _redactor(self, workspace: Path) -> Redactor:
        return self._watch(workspace).redactor()

    # ``replayed`` is inherited unchanged: a rebuilt run's results come from its log, which
    # holds them already redacted.
