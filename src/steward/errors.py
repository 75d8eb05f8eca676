"""Steward's exceptions, written down once.

Errors have three audiences:

* the **model**: a bad tool call or a failing tool is never raised out of a run; it goes
  back to the model as a tool result it can fix (``ToolError`` is how a tool says so);
* the **developer or user**: misuse raises an exception whose message names the fix;
* the **operator**: a run that fails carries its run id and status.

    StewardError
     ├── ConfigError          bad configuration: file, key and what is allowed
     ├── ModelError           a provider failed (bad key, unknown model, unreachable, exhausted retries)
     │    └── ScriptError     the scripted model's script is malformed, ran out or was left over
     ├── ToolError            raised inside a tool: the message goes back to the model
     ├── ApprovalRequired     raised by the policy wrapper: the run pauses for a human
     ├── RunError             a run could not continue; carries run_id and status
     │    └── ReplayError     a recorded run cannot be rebuilt (its log and the loop disagree)
     └── StoreError           the store could not record or read something (what was recorded is kept)
"""

from __future__ import annotations

from typing import Any


class StewardError(Exception):
    """Base of every exception Steward raises on purpose."""


class ConfigError(StewardError):
    """The configuration (file, environment or flags) is wrong; the message names the fix."""


class ModelError(StewardError):
    """A model provider failed in a way the run cannot recover from by itself.

    ``retryable`` is true for failures that a later attempt may not repeat (rate limits,
    server errors, timeouts) once the provider's own bounded retries are used up.
    """

    def __init__(
        self, message: str, *, provider: str = "", retryable: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.retryable = retryable
        #: Seconds to wait before trying again, when known better than the loop's backoff.
        self.retry_after = retry_after


class ScriptError(ModelError):
    """The scripted model's script is malformed, was exhausted or was not fully used."""


class ToolError(StewardError):
    """Raise inside a tool to send ``message`` back to the model as a failed result."""


class ApprovalRequired(StewardError):  # noqa: N818 - control flow: the run pauses, nothing failed
    """A call needs a human's approval before it runs; the loop pauses the run on it."""

    def __init__(
        self,
        *,
        tool: str,
        arguments: dict[str, Any],
        call_hash: str,
        reason: str,
        suggestion: str | None,
        description: str = "",
        deadline: float | None = None,
        waits_for: str = "",
    ) -> None:
        super().__init__(f"{tool} needs approval: {reason}")
        self.tool = tool
        self.arguments = arguments
        self.call_hash = call_hash
        self.reason = reason
        self.suggestion = suggestion
        #: What the tool says it does, shown to the human (MCP tools: the server's own words).
        self.description = description
        #: When the approval expires (epoch seconds); None: the run's approval timeout from now.
        self.deadline = deadline
        #: A job the call waits for instead of a person (``delegate``): the run goes on when it ends.
        self.waits_for = waits_for


class RunError(StewardError):
    """A run could not continue."""

    def __init__(self, message: str, *, run_id: str, status: str) -> None:
        super().__init__(f"{message} (run {run_id}, status {status})")
        self.run_id = run_id
        self.status = status


class ReplayError(RunError):
    """The recorded log and the loop disagree: the run cannot be rebuilt faithfully."""


class StoreError(StewardError):
    """The store could not record or read something; what was recorded before is kept."""


class FencedOut(StoreError):  # noqa: N818 - a fact the worker acts on, like LeaseLost
    """A worker's claim on a job's run is no longer the newest: another worker took the job over
    (this one was paused or cut off past its lease). Nothing more of this worker reaches the log."""
