"""A rollout's world for GRPO: Steward's tools as the methods of a TRL environment.

TRL's ``GRPOTrainer(environment_factory=StewardEnvironment, ...)`` makes its own rollouts: it
calls ``reset`` with each dataset row (``steward runs export --format tasks``, or
``steward.trajectories.tasks.task_file_rows`` over a ``steward batch`` tasks file), offers the
public methods as tools, calls them as the model asks, and scores the rollout with
``get_reward``. Here:

- ``reset(prompt=..., workspace=..., verify=...)`` gives the rollout a fresh copy of the task's
  workspace in a temporary folder (the previous rollout's is removed);
- ``read_file``, ``write_file``, ``edit_file``, ``list_dir`` and ``bash`` are Steward's tools,
  called through the agent's whole stack: the guard, the policy (autonomous: nobody is there to
  approve, so what would need a human is refused), the bubblewrap sandbox for ``bash``, and
  the redaction of secret values. Checkpoints are off: the folder is thrown away whole;
- ``get_reward`` runs the task's verifier (the task's command, so no policy asks about it) in the
  sandbox: 1.0 when it exits 0, else 0.0 (0.0 too for a task without one: give the trainer
  ``reward_funcs`` then).

Tools return text, errors included (the model reads them and goes on), as in a Steward run.
The methods are synchronous (TRL calls them from its generation loop): each call runs Steward's
async tool on an event loop of its own, so call them where no event loop is running.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steward.agent import Agent
    from steward.config import Config
    from steward.tools.base import ToolContext, Toolset

__all__ = ["StewardEnvironment"]

_VERIFY_TIMEOUT_S = 300.0


class StewardEnvironment:
    """One rollout at a time in a workspace of its own (see the module's docstring).

    ``config``: the Steward configuration whose tools, policy and sandbox apply (default: the
    built-in one; ``sandbox=False`` runs ``bash`` without bubblewrap, only where it cannot start).
    """

    def __init__(
        self, *, config: Config | None = None, sandbox: bool = True, root: Path | None = None
    ) -> None:
        self.config = config
        self.sandbox = sandbox
        #: Where rollout folders are made (default: the system's temporary folder).
        self.root = root
        self.workspace: Path | None = None
        self.verify = ""
        self._toolset: Toolset | None = None
        self._ctx: ToolContext | None = None
        self._checker: Toolset | None = None
        self._made: Agent | None = None
        self._cleanup: weakref.finalize[Any, Any] | None = None

    # --- TRL's contract ------------------------------------------------------------------

    def reset(self, **row: Any) -> str | None:
        """Start a rollout of ``row``'s task: a fresh copy of its ``workspace`` (a folder; empty
        when none is given) and its ``verify`` command. Nothing is added to the prompt."""
        self._clear()
        template = str(row.get("workspace") or "")
        self.verify = str(row.get("verify") or "")
        folder = Path(tempfile.mkdtemp(prefix="steward-rollout-", dir=self.root))
        if template:
            source = Path(template)
            if not source.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
                raise ValueError(f"the task's workspace {template} is not a folder: give the task's template")
            shutil.copytree(source, folder, dirs_exist_ok=True, symlinks=True)
        self.workspace = folder
        # TRL never closes an environment: the last rollout's folder goes when this object does.
        self._cleanup = weakref.finalize(self, shutil.rmtree, folder, True)
        self._ctx = None  # made for the new folder on first use
        return None

    def get_reward(self) -> float:
        """1.0 when the task's verifier exits 0 in the rollout's workspace, else 0.0."""
        if not self.verify:
            return 0.0
        from steward.tools.shell import bash

        result = self._run(
            self._verifier(), bash.name, {"command": self.verify, "timeout_s": _VERIFY_TIMEOUT_S}
        )
        return 1.0 if not result[1] and result[0].rstrip().endswith("exit code: 0") else 0.0

    # --- the tools (Steward's, by name) ---------------------------------------------------

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Read a text file in the workspace, with line numbers.

        Args:
            path: File path, relative to the workspace root.
            start_line: First line to show, 1-based. Default: 1.
            end_line: Last line to show, inclusive. Default: the end of the file.
        """
        return self._tool("read_file", {"path": path, "start_line": start_line, "end_line": end_line})

    def write_file(self, path: str, content: str) -> str:
        """Create a file, or replace a file's whole content. Parent directories are created.

        Args:
            path: File path, relative to the workspace root.
            content: The complete new content of the file.
        """
        return self._tool("write_file", {"path": path, "content": content})

    def edit_file(self, path: str, old_text: str, new_text: str) -> str:
        """Replace one exact piece of text in a file; old_text must occur exactly once.

        Args:
            path: File path, relative to the workspace root.
            old_text: The exact text to replace.
            new_text: The text to put in its place.
        """
        return self._tool("edit_file", {"path": path, "old_text": old_text, "new_text": new_text})

    def list_dir(self, path: str = ".") -> str:
        """List one directory of the workspace (not recursive).

        Args:
            path: Directory path, relative to the workspace root.
        """
        listed = self._tool("list_dir", {"path": path})
        return self._without_state_dir(path, listed)

    def bash(self, command: str) -> str:
        """Run a shell command with bash in the workspace root; the last line is 'exit code: N'.

        Args:
            command: The command to run.
        """
        return self._tool("bash", {"command": command})

    # --- the plumbing ------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the current rollout's folder (or let the environment go: it goes then)."""
        self._clear()

    def _tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        given = {key: value for key, value in arguments.items() if value is not None}
        text, _ = self._run(self._tools(), name, given)
        return text

    def _without_state_dir(self, path: str, listed: str) -> str:
        """A listing of the rollout's root without Steward's own folder (the sandbox keeps its
        bookkeeping there): the model sees the task's files, as glob and grep show them."""
        from steward.state_dir import STATE_DIR

        assert self.workspace is not None
        try:
            at_root = (self.workspace / path).resolve() == self.workspace.resolve()
        except (OSError, ValueError):
            return listed
        lines = listed.split("\n")
        if not at_root or f"{STATE_DIR}/" not in lines:
            return listed
        kept = [line for line in lines if line != f"{STATE_DIR}/"]
        return "\n".join(kept) if kept else "[./ is empty]"

    def _run(self, toolset: Toolset, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """Call ``name`` through ``toolset``; its text and whether it failed."""
        from steward.errors import ApprovalRequired

        if self.workspace is None:
            raise RuntimeError("call reset() first: a rollout starts with a workspace")
        try:  # a loop of its own for each call: nothing is left open between TRL's calls
            result = asyncio.run(toolset.call_tool(name, arguments, self._context()))
        except ApprovalRequired as asked:
            return f"Not run: {name} needs a human's approval ({asked.reason}), and a rollout has none.", True
        return result.content, result.is_error

    def _tools(self) -> Toolset:
        if self._toolset is None:
            self._toolset = self._agent().toolset()
        return self._toolset

    def _agent(self) -> Agent:
        if self._made is None:
            from dataclasses import replace

            from steward.agent import Agent
            from steward.config import Config

            config = self.config or Config()
            config = replace(
                config, policy=replace(config.policy, mode="autonomous"),
                checkpoints=replace(config.checkpoints, enabled=False),
            )  # fmt: skip
            self._made = Agent(config=config, sandbox=self.sandbox, memory=False)
        return self._made

    def _verifier(self) -> Toolset:
        """Where the verifier runs: ``bash`` alone (the user's command, not the model's, so no
        policy asks about it), in the same sandbox."""
        if self._checker is None:
            from steward.tools.base import FunctionToolset
            from steward.tools.shell import bash

            self._checker = FunctionToolset([bash])
        return self._checker

    def _context(self) -> ToolContext:
        if self._ctx is None:
            assert self.workspace is not None
            from steward.safety.protected import protected_reason
            from steward.settings import tool_settings
            from steward.tools.base import ToolContext

            agent, workspace = self._agent(), self.workspace
            sandbox = agent.sandbox()  # first: it sets what the policy counts as masked
            self._ctx = ToolContext(
                workspace=workspace, run_id=f"rollout-{os.getpid()}-{id(self):x}",
                settings=tool_settings(agent.config), sandbox=sandbox, writable=agent.policy.write,
                protected=lambda path: protected_reason(workspace, path),
            )  # fmt: skip
        return self._ctx

    def _clear(self) -> None:
        if self._cleanup is not None:
            self._cleanup()  # removes the folder, once
            self._cleanup = None
        self.workspace = None
