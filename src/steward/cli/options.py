"""What the commands share: exit codes, option types, and the configuration a command's flags make."""

from __future__ import annotations

from collections.abc import Callable
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


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    typer.echo(f"steward: {message}", err=True)
    return typer.Exit(code)


def _span(least: int | None, most: int | None) -> str:
    if least is not None and most is not None:
        return f"{least} to {most}"
    return f"{least} or more" if least is not None else f"at most {most}"


def whole_number(
    flag: str, unit: str, example: int, *, least: int | None = None, most: int | None = None
) -> Callable[[str | int], int]:
    """The parser of every whole-number option and argument: a wrong value is one line in our
    words (the flag, what it takes, an example), never click's or pydantic's, nor a traceback.
    ``unit`` is what is counted ("steps"), or "" when the number is a name (a port)."""

    def parse(given: str | int) -> int:
        if isinstance(given, int):  # a default, passed through
            number = given
        else:
            try:
                number = int(given.strip().replace("_", ""), 10)
            except ValueError:
                of = f" of {unit}" if unit else ""
                raise fail(f"{flag} takes a whole number{of}, e.g. {example} (got {given!r})") from None
        if (least is not None and number < least) or (most is not None and number > most):
            span = _span(least, most)
            what = f"{span} {unit}" if unit else f"a whole number{' from ' if ' to ' in span else ', '}{span}"
            raise fail(f"{flag} takes {what}, e.g. {example} (got {number})")
        return number

    return parse


def whole_option(
    *names: str, unit: str, example: int, least: int | None = None, most: int | None = None, help: str
) -> Any:
    """A ``typer.Option`` that takes a whole number through ``whole_number``."""
    return typer.Option(
        *names,
        parser=whole_number(names[0], unit, example, least=least, most=most),
        metavar="N",
        help=help,
    )


def whole_argument(
    name: str, said: str, *, unit: str, example: int, least: int | None = None, help: str
) -> Any:
    """A ``typer.Argument`` (shown as ``name``, called ``said`` in an error) that takes a whole
    number through ``whole_number``."""
    return typer.Argument(parser=whole_number(said, unit, example, least=least), metavar=name, help=help)


MaxSteps = Annotated[
    int | None,
    whole_option("--max-steps", unit="steps", example=40, least=1, help="Most model calls for this run."),
]
# Help texts are rich markup: a section is written \\[budget], or it vanishes as a style tag.


def _token_count(text: str) -> int:
    """``--budget-tokens 200k``, ``1.5M`` or ``200000``."""
    from steward.config import parse_count

    count = parse_count(text)
    if count is None:
        raise fail(f"--budget-tokens takes a number of tokens, e.g. 200000, 200k or 1.5M (got {text!r})")
    if count < 1:
        raise fail("--budget-tokens 0 leaves no room for a model call: give 1 or more")
    return count


def _dollars(text: str) -> float:
    """``--budget-usd 0.50`` or ``$0.50``."""
    from steward.config import parse_dollars

    amount = parse_dollars(text)
    if amount is None:
        raise fail(f"--budget-usd takes an amount of US dollars: write 0.50 or $0.50 (got {text!r})")
    return amount


def budget_tokens_option(whose: str) -> Any:
    """``--budget-tokens`` for the runs ``whose`` names ("this run", "each attempt's run")."""
    return typer.Option(
        "--budget-tokens",
        parser=_token_count,
        metavar="TOKENS",
        help=f"Most tokens {whose} may use, e.g. 200k or 1.5M (\\[budget] tokens).",
    )


def budget_usd_option(whose: str) -> Any:
    """``--budget-usd`` for the runs ``whose`` names."""
    return typer.Option(
        "--budget-usd",
        parser=_dollars,
        metavar="USD",
        help=f"Most US dollars {whose} may spend, e.g. 0.50 (\\[budget] cost_usd).",
    )


BudgetTokens = Annotated[int | None, budget_tokens_option("this run")]
BudgetUsd = Annotated[float | None, budget_usd_option("this run")]


def budget_flags(tokens: int | None, usd: float | None) -> dict[str, float]:
    """The ``[budget]`` values ``--budget-tokens`` and ``--budget-usd`` give (only those given)."""
    return {key: value for key, value in (("tokens", tokens), ("cost_usd", usd)) if value is not None}


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
