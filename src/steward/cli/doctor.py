"""``steward doctor``: every safety layer on this machine, the configuration, the model and memory."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

from steward.cli.options import EXIT_NOT_SOLVED, EXIT_OK, config_from_flags

if TYPE_CHECKING:  # `steward --help` imports this module: the configuration's code waits for a check
    from steward.config import Config

MODEL_FLAGS = ("--model", "-m")

TryModelOpt = Annotated[
    str | None,
    typer.Option(
        *MODEL_FLAGS,
        metavar="[SPEC]",
        help="Also send the model three tiny real requests and report: reachable, streams text, "
        "streams tool calls, honours max_tokens, reports usage. Bare: the configured model; with "
        "SPEC (provider:model), that one. Without --model nothing is billed.",
    ),
]

TryEmbedderOpt = Annotated[
    bool,
    typer.Option(
        "--embedder",
        "--memory",
        help="Also embed three test sentences with \\[memory] embedder and report its dimensions, its "
        "time and how close alike and unlike sentences come out. Without it nothing is sent.",
    ),
]


class DoctorCommand(TyperCommand):
    """``steward doctor``, whose ``--model`` may come with a value or without one.

    Typer's parser has no option with an optional value, so a bare ``--model`` (last, or before
    another option) is given an empty one before parsing: "" means the configured model.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, bare_model_filled(args))


def bare_model_filled(args: list[str]) -> list[str]:
    """``args`` with "" after a ``--model`` or ``-m`` that has no value (up to ``--``)."""
    out: list[str] = []
    for n, arg in enumerate(args):
        if arg == "--":
            return [*out, *args[n:]]
        out.append(arg)
        if arg in MODEL_FLAGS and (n + 1 == len(args) or args[n + 1].startswith("-")):
            out.append("")  # a model spec never starts with "-"
    return out


def check(
    workspace: Path, model: str | None = None, *, try_model: bool = False, try_embedder: bool = False
) -> None:
    """Check this machine: the sandbox, its limits, the configuration, the model, the store, memory.

    ``try_model``: also send the model (``model``, else the configured one) tiny real requests;
    ``try_embedder``: also embed test sentences with the configured embedder.
    """
    import platform

    from steward import __version__
    from steward.cli.checkup import (
        check_embedder,
        check_memory,
        check_model,
        check_model_requests,
        check_store,
    )
    from steward.safety.sandbox.bubblewrap import sandbox_from_config

    config = config_from_flags(workspace, model, None)
    typer.echo(f"steward {__version__} on Python {platform.python_version()} ({sys.executable})")
    if not config.sandbox.enabled:
        typer.echo("sandbox: turned off in the configuration ([sandbox] enabled = false)")
        status_ok = True
    else:
        from steward.safety.sandbox.selfcheck import cache_path

        status = sandbox_from_config(config.sandbox).probe()  # always a real start: refreshes the cache
        typer.echo(status.render())
        typer.echo(f"  checked now; other commands reuse this outcome ({cache_path()})")
        status_ok = status.ok
    policy = config.policy
    typer.echo(
        f"policy: mode {policy.mode}, writes {'on' if policy.write else 'off'}, "
        f"{len(policy.allow)} allow / {len(policy.ask)} ask / {len(policy.deny)} deny rules, "
        f"approvals wait {policy.approval_timeout_s:g} s then {policy.on_timeout}"
    )
    _layers(workspace, config)
    model_ok = check_model(config)
    if try_model:  # the requests tell better than the list whether runs can use the model
        model_ok = check_model_requests(config)
    store_ok = check_store(config, workspace)
    memory_ok = check_memory(config, workspace)
    if try_embedder:
        memory_ok = check_embedder(config) and memory_ok
    _context(workspace, config)
    from steward.telemetry import describe

    tracing = describe(config)
    typer.echo(f"tracing: {tracing}")
    ok = status_ok and model_ok and store_ok and memory_ok and not tracing.startswith("ON but")
    raise typer.Exit(EXIT_OK if ok else EXIT_NOT_SOLVED)


def _layers(workspace: Path, config: Config) -> None:
    """Which safety layers are on here, besides the sandbox itself."""
    from steward.safety.checkpoints.around_calls import settings_from_config
    from steward.safety.checkpoints.scan import scanner_for
    from steward.safety.checkpoints.shadow import default_state_dir
    from steward.safety.policy.rules import Policy
    from steward.safety.sandbox.bubblewrap import mask_plan
    from steward.tools._beneath import openat2_available

    typer.echo("guard: on (every command parsed and judged; blocks what is known to be dangerous)")
    p = config.policy
    policy = Policy.from_lists(allow=p.allow, ask=p.ask, deny=p.deny, mode=p.mode, write=p.write)
    if config.sandbox.enabled:
        plan = mask_plan(config.sandbox, policy)
        masked = ", ".join(sorted(plan.masked)) or "none"
        typer.echo(f"program masks: {masked} (programs deny rules forbid with any arguments)")
        for warning in plan.warnings:
            typer.echo(f"  warning: {warning}")
        domains = ", ".join(config.sandbox.allowed_domains) or "none ([sandbox] allowed_domains)"
        typer.echo(
            "network: every command in its own network namespace; a call granted the network reaches "
            f"only these domains through the egress proxy: {domains}; host loopback and private "
            "addresses never"
        )
    checkpoints = settings_from_config(config)
    if checkpoints.enabled:
        where = checkpoints.state_dir or default_state_dir()
        from steward.safety.checkpoints.shadow import _find_git

        git = os.access(_find_git(), os.X_OK)
        typer.echo(
            f"checkpoints: on, before every call that can change files (shadow repositories in {where}; "
            f"untracked files over {config.checkpoints.max_file_mb:g} MB left out)"
            + ("" if git else "; NOT WORKING: git is not installed (apt-get install git)")
        )
    else:
        typer.echo("checkpoints: off ([checkpoints] enabled = false): a damaged workspace cannot be rewound")
    typer.echo(
        "change detection: on (repository metadata and protected files compared after every such call)"
    )
    scan = scanner_for(workspace.resolve(), tuple(config.sandbox.secret_files)).scan()
    from steward.safety.sealed import CLASSES, found_here

    typer.echo(f"sealed (what the host runs later: read-only in commands, undone after, asked for by the "
               f"file tools; here {found_here(workspace.resolve(), scan.sealed, scan.sites)}):")  # fmt: skip
    typer.echo("".join(f"  - {line}\n" for line in CLASSES), nl=False)
    secrets = scan.secrets
    shown = ", ".join(secrets[:5]) + (f" and {len(secrets) - 5} more" if len(secrets) > 5 else "")
    noun = "secret file" if len(secrets) == 1 else "secret files"
    found = f"{len(secrets)} {noun} here" + (f" ({shown})" if secrets else "")
    typer.echo(
        f"secrets: {found}: masked in the sandbox, refused by the file tools unless a rule allows "
        "them, their values redacted from tool output"
    )
    typer.echo(
        "file tools: paths opened beneath the workspace in one step "
        + (
            "(openat2 RESOLVE_BENEATH)"
            if openat2_available()
            else "(a component walk refusing links that lead out)"
        )
    )
    limit = config.limits.run_timeout_s
    typer.echo(f"run time limit: {f'{limit:g} s' if limit else 'none ([limits] run_timeout_s)'}")


def _context(workspace: Path, config: Config) -> None:
    """What the agent will be told about this workspace: rules, skills, MCP servers."""
    from steward.rules import find_skills

    root = workspace.resolve()
    agents_md = (root / "AGENTS.md").is_file()
    typer.echo(f"rules: {'AGENTS.md found' if agents_md else 'no AGENTS.md'}"
               f"{'' if config.rules.agents_md else ' (turned off: [rules] agents_md = false)'}")  # fmt: skip
    scan = find_skills(root, config.rules)
    typer.echo(f"skills: {len(scan.skills)} found in {', '.join(config.rules.skill_dirs) or '(no folders)'}")
    for warning in scan.warnings:
        typer.echo(f"  warning: {warning}")
    servers = config.mcp_servers
    enabled = [n for n, c in servers.items() if c.enabled]
    if servers:
        typer.echo(f"mcp: {len(enabled)} of {len(servers)} servers enabled ({', '.join(enabled)}); "
                   "`steward mcp list` starts them and shows their tools")  # fmt: skip
        _mcp_problem(config)
    else:
        typer.echo("mcp: no servers configured ([mcp_servers.NAME] in steward.toml)")


def _mcp_problem(config: Config) -> None:
    from steward.errors import ConfigError
    from steward.mcp import check_servers

    try:
        check_servers(config.mcp_servers)
    except ConfigError as exc:
        typer.echo(f"  problem: {exc}")
