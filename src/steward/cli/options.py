"""What the commands share: exit codes, option types, and the configuration a command's flags make."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from steward.config import Config
    from steward.personas import Persona

EXIT_OK, EXIT_NOT_SOLVED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
EXIT_ANSWERED = 3
"""The agent answered in plain text without saying the goal was done (end status ``answered``)."""

EXIT_CODES_HELP = (
    "Exit codes: 0 solved; 3 answered (the agent answered without saying the goal was done); "
    "1 partial, stuck or failed; 2 usage or configuration error; 130 interrupted; 143 terminated."
)


def exit_code(status: str, end_status: str | None) -> int:
    """How a run (or a job's run) that stopped as ``status``/``end_status`` ends the command."""
    if status != "done":
        return EXIT_NOT_SOLVED
    return {"solved": EXIT_OK, "answered": EXIT_ANSWERED}.get(end_status or "", EXIT_NOT_SOLVED)


NO_MODEL = (
    "No model configured. Set STEWARD_MODEL=openai:gpt-4o-mini (or pass --model, or put "
    'model = "anthropic:claude-sonnet-4-5" in steward.toml), or run `steward demo` to see a scripted run.'
)

Workspace = Annotated[
    Path, typer.Option("--workspace", "-w", help="Directory the agent works in (default: current directory).")
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="provider:model, e.g. openai:gpt-4o-mini, anthropic:..., ollama:..."),
]
MaxSteps = Annotated[int | None, typer.Option("--max-steps", min=1, help="Most model calls for this run.")]
# Help texts are rich markup: a section is written \\[budget], or it vanishes as a style tag.


def _token_count(text: str) -> int:
    """``--budget-tokens 200k``, ``1.5M`` or ``200000``."""
    from steward.config import parse_count

    count = parse_count(text)
    if count is None:
        raise typer.BadParameter(f"{text!r} is not a number of tokens: write 200000, 200k or 1.5M")
    if count < 1:
        raise typer.BadParameter("a budget of no tokens leaves no room for a model call: give 1 or more")
    return count


BudgetTokens = Annotated[
    int | None,
    typer.Option(
        "--budget-tokens",
        parser=_token_count,
        metavar="TOKENS",
        help="Most tokens this run may use, e.g. 200k or 1.5M (\\[budget] tokens).",
    ),
]


def _dollars(text: str) -> float:
    """``--budget-usd 0.50`` or ``$0.50``."""
    from steward.config import parse_dollars

    amount = parse_dollars(text)
    if amount is None:
        raise typer.BadParameter(f"{text!r} is not an amount of US dollars: write 0.50 or $0.50")
    return amount


BudgetUsd = Annotated[
    float | None,
    typer.Option(
        "--budget-usd",
        parser=_dollars,
        metavar="USD",
        help="Most US dollars this run may spend, e.g. 0.50 (\\[budget] cost_usd).",
    ),
]
ModeOpt = Annotated[
    str | None,
    typer.Option(
        "--mode",
        help="structured: risky calls wait for your approval; autonomous: they are approved automatically "
        "(the guard, deny rules, the sandbox and the step limit stay on).",
    ),
]
NoSandbox = Annotated[
    bool,
    typer.Option("--no-sandbox", help="Run commands without the bubblewrap sandbox (you accept the risk)."),
]
AllowOpt = Annotated[
    list[str] | None, typer.Option("--allow", help='Allow rule, e.g. "bash(pytest*)". Repeatable.')
]
AskOpt = Annotated[
    list[str] | None, typer.Option("--ask", help='Ask rule, e.g. "edit_file(src/**)". Repeatable.')
]
DenyOpt = Annotated[
    list[str] | None, typer.Option("--deny", help='Deny rule, e.g. "bash(rm *)". Repeatable.')
]
ReadOnly = Annotated[
    bool, typer.Option("--read-only", help="Turn every write tool off; bash sees the workspace read-only.")
]


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    typer.echo(f"steward: {message}", err=True)
    return typer.Exit(code)


def config_from_flags(
    workspace: Path,
    model: str | None,
    max_steps: int | None,
    *,
    mode: str | None = None,
    no_sandbox: bool = False,
    allow: list[str] | None = None,
    ask: list[str] | None = None,
    deny: list[str] | None = None,
    read_only: bool = False,
    persona: Persona | None = None,
    budget: dict[str, float] | None = None,
) -> Config:
    """The configuration of ``workspace`` with the command line's flags (and a persona's layer)."""
    from steward.config import load_config

    overrides: dict[str, Any] = {"budget": budget} if budget else {}
    if model:
        overrides["model"] = model
    if max_steps:
        overrides["limits"] = {"max_steps": max_steps}
    policy: dict[str, Any] = {
        key: value for key, value in (("allow", allow), ("ask", ask), ("deny", deny)) if value
    }
    if mode:
        policy["mode"] = mode
    if read_only:
        policy["write"] = False
    if policy:
        overrides["policy"] = policy
    if no_sandbox:
        overrides["sandbox"] = {"enabled": False}
        typer.echo("steward: warning: --no-sandbox: commands run directly on this machine.", err=True)
    if persona is None:
        return load_config(workspace, overrides=overrides)
    return load_config(
        workspace, overrides=overrides, persona=persona.layer(), persona_source=str(persona.source)
    )


ResumeOpt = Annotated[
    str | None,
    typer.Option(
        "--resume", help="Continue recorded run RUN (an id, a prefix, or 'last') instead of a new goal."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the event stream as NDJSON.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the final answer.")]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Resume even if the run's recorded process may still be alive.")
]
PersonaOpt = Annotated[
    str | None,
    typer.Option(
        "--persona", "-p", help="Run as this persona (personas/NAME.toml; `steward personas list`)."
    ),
]
