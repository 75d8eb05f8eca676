"""``steward personas``: the personas a workspace can run, and what each one is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

personas_app = typer.Typer(help="Personas: list them, show one.", no_args_is_help=True)

Workspace = Annotated[Path, typer.Option("--workspace", "-w", help="Workspace whose personas to read.")]


@personas_app.command("list")
def list_command(workspace: Workspace = Path()) -> None:
    """List every persona available here, with its role and the file it comes from."""
    from steward.errors import ConfigError
    from steward.personas import list_personas, read_persona

    for name, path in sorted(list_personas(workspace.resolve()).items()):
        try:
            role = read_persona(path).role or "(no role)"
        except ConfigError as exc:
            role = f"(broken: {exc})"
        typer.echo(f"{name:<16} {role:<24} {path}")


@personas_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="The persona's name, e.g. coder.")],
    workspace: Workspace = Path(),
) -> None:
    """Show a persona: its words, the tools it may use, its model, policy and limits."""
    from steward.personas import find_persona

    persona = find_persona(name, workspace.resolve())
    typer.echo(f"persona {persona.name}  ({persona.source})")
    for label, value in (("role", persona.role), ("goal", persona.goal), ("backstory", persona.backstory)):
        if value:
            typer.echo(f"{label}: {value}")
    if persona.instructions:
        typer.echo("instructions:\n  " + persona.instructions.replace("\n", "\n  "))
    tools = ", ".join(persona.tools) if persona.tools is not None else "every tool"
    typer.echo(f"tools: {tools}")
    typer.echo(f"model: {persona.model or '(the configured one)'}")
    if persona.prompt_style:
        typer.echo(f"prompt: {persona.prompt_style}")
    for section, values in (("policy", persona.policy), ("limits", persona.limits)):
        if values:
            shown = ", ".join(f"{key} = {value!r}" for key, value in values.items())
            typer.echo(f"[{section}] {shown}")
    if persona.output_schema is not None:
        typer.echo(f"output_schema: {json.dumps(persona.output_schema)}")
