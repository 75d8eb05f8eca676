"""``steward batch``: run a task set K times through the job queue and report pass@k.

The command checks the whole task file first (nothing is queued while a line is wrong), writes
the batch's manifest to its report directory, queues each attempt in a fresh copy of its
template, runs the jobs with a worker of its own (``--workers N`` slots in this process; with
``--workers 0`` the fleet's workers take them) and follows them with one progress bar. Ctrl-C
stops following: the running jobs reach their next step and go back to the queue, the report
holds what finished, and ``steward batch --resume DIR`` goes on (nothing runs twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from steward.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    budget_flags,
    budget_tokens_option,
    budget_usd_option,
    fail,
    whole_option,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from rich.console import Console

    from steward.batch.follow import Counts, Follower, Outcome
    from steward.batch.plan import Manifest
    from steward.batch.report import TaskFigures
    from steward.batch.tasks import Task
    from steward.jobs.api import Queue
    from steward.personas import Persona

TasksFile = Annotated[
    Path | None, typer.Argument(help="The task set: one JSON object per line.", metavar="TASKS.jsonl")
]


def batch(
    tasks_file: TasksFile = None,
    persona: Annotated[
        str | None,
        typer.Option(
            "--persona",
            "-p",
            help="The persona every attempt runs as (steward personas list); default: coder.",
        ),
    ] = None,
    attempts: Annotated[
        int | None,
        whole_option(
            "--attempts",
            "-k",
            unit="runs per task",
            example=5,
            help="Runs per task (pass@k for k up to this); default: 1.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="The model, e.g. openai:gpt-4o-mini; 'scripted' plays each task's script."
        ),
    ] = None,
    workers: Annotated[
        int,
        whole_option(
            "--workers",
            "-j",
            unit="jobs",
            example=4,
            least=0,
            help="Jobs run at once by this command; 0: workers elsewhere take them.",
        ),
    ] = 2,
    store: Annotated[
        str | None,
        typer.Option("--store", help="The store (and queue) URL; default: configured, else DIR/steward.db."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="The report directory (default: ./batch-DATE-TIME).")
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option("--mode", help="structured or autonomous for every run; default: as configured."),
    ] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Go on with the batch whose report directory this is.")
    ] = None,
    budget_tokens: Annotated[int | None, budget_tokens_option("each attempt (not the whole batch)")] = None,
    budget_usd: Annotated[float | None, budget_usd_option("each attempt (not the whole batch)")] = None,
) -> None:
    """Run each task of TASKS.jsonl --attempts times and report pass@1, pass@k, steps, tokens, cost, time.

    \b
    A task, one JSON object per line:
      {"id": "fix-mean", "goal": "Fix the failing test",
       "workspace": "tasks/fix-mean",          a template, copied fresh per attempt
       "verify": "python3 -m unittest -q",     optional: exit 0 passes
       "script": "solutions/fix-mean.yaml"}    optional: for --model scripted
    Without "verify", an attempt passes when its run ends solved. The report
    (report.md, report.json, trajectories/TASK.jsonl, tasks.jsonl) goes to -o DIR.
    --budget-tokens and --budget-usd are per attempt: each run gets the whole
    budget (a run that reaches it ends partial).
    Ctrl-C stops; `steward batch --resume DIR` goes on (nothing runs twice).
    """
    from steward.batch.plan import Manifest

    _apply_this_folders_config(workers)
    if resume is not None:
        if tasks_file is not None:
            raise fail("give either TASKS.jsonl or --resume DIR: a resumed batch keeps its own tasks")
        given = {
            "--persona": persona, "--attempts": attempts, "--model": model, "--mode": mode, "-o": output,
            "--budget-tokens": budget_tokens, "--budget-usd": budget_usd,
        }  # fmt: skip
        if named := [flag for flag, value in given.items() if value is not None]:
            raise fail(
                f"{', '.join(named)} cannot change a batch under way: --resume keeps its own settings "
                "(--workers and --store may be given)"
            )
        manifest = Manifest.load(resume)
        url = store or _kept_store(manifest.store)
    elif tasks_file is None:
        raise fail("give a task file, e.g. steward batch examples/tasks.jsonl --model scripted")
    else:
        directory = (output or _default_dir()).resolve()
        url = store or _configured_store() or f"sqlite:///{directory / 'steward.db'}"
        manifest = _plan(
            tasks_file, persona or "coder", 1 if attempts is None else attempts, model, mode, url, directory,
            budget_flags(budget_tokens, budget_usd),
        )  # fmt: skip
    raise typer.Exit(asyncio.run(_run(manifest, workers, url, fresh=resume is None)))


def _apply_this_folders_config(workers: int) -> None:
    """The attempts run in copies of their templates, where this folder's steward.toml (the one
    `steward run` here reads: a model server's base_url, prices, limits) is not found: it is named
    as ``STEWARD_CONFIG`` for this command's own workers, the model check and the verifiers, unless
    STEWARD_CONFIG names a file already. A fleet's workers read their own configuration."""
    here = Path("steward.toml").resolve()
    if os.environ.get("STEWARD_CONFIG") or not here.is_file():
        return
    os.environ["STEWARD_CONFIG"] = str(here)
    if workers == 0:
        typer.echo(
            f"steward: note: this command's checks use {here}, but the workers that take the jobs read "
            "their own configuration (their STEWARD_CONFIG, ~/.config/steward/config.toml, the template's)",
            err=True,
        )


def _default_dir() -> Path:
    return Path(f"batch-{time.strftime('%Y%m%d-%H%M%S')}")


def _without_password(url: str) -> str:
    """``url`` as the manifest keeps it: a password is not written to the report directory."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return parsed.render_as_string(hide_password=True) if parsed.password else url


def _kept_store(kept: str) -> str:
    """The store a resumed batch goes on in: the manifest's, unless its password was left out."""
    from sqlalchemy.engine import make_url

    if make_url(kept).password is None:
        return kept
    configured = _configured_store()
    if configured is not None and _without_password(configured) == kept:
        return configured
    raise fail(f"the batch's store is {kept} (its password is not kept in batch.json): pass --store URL")


def _plan(
    tasks_file: Path, persona: str, attempts: int, model: str | None, mode: str | None, url: str,
    directory: Path, budget: dict[str, float],
) -> Manifest:  # fmt: skip
    """The new batch's manifest, written once every input is checked."""
    from steward.batch.plan import new_manifest, too_big
    from steward.batch.tasks import load_tasks

    if attempts < 1:
        raise fail(
            f"--attempts {attempts}: each task needs at least one attempt (pass@k needs k <= attempts)"
        )
    if mode is not None and mode not in ("structured", "autonomous"):
        raise fail(f"--mode {mode!r} is not a mode; use structured or autonomous")
    tasks = load_tasks(tasks_file)
    if (why := too_big(len(tasks), attempts, tasks_file)) is not None:
        raise fail(why)
    _check_persona_and_model(tasks, persona, model, tasks_file)
    manifest = new_manifest(
        directory, tasks, tasks_file=tasks_file, persona=persona, model=model, mode=mode, attempts=attempts,
        store=_without_password(url), budget=budget,
    )  # fmt: skip
    try:
        directory.mkdir(parents=True, exist_ok=True)
        manifest.save()
    except OSError as exc:
        if directory.exists() and not directory.is_dir():
            raise fail(
                f"-o {directory} is a file; give a directory for the report (made if missing)"
            ) from None
        raise fail(
            f"cannot write the report to {directory}: {exc.strerror or exc}; "
            "give -o a directory you can write"
        ) from None
    return manifest


def _check_persona_and_model(tasks: list[Task], persona: str, model: str | None, tasks_file: Path) -> None:
    """The persona is there for every template, and its model can work (a key, a known provider):
    a model that cannot would fail every attempt, after all of them were queued."""
    from steward.agent import Agent
    from steward.batch.plan import SCRIPTED
    from steward.config import load_config
    from steward.errors import ConfigError, ModelError

    for task in {t.workspace: t for t in tasks}.values():  # once per template
        try:
            found = _persona_for(persona, task)
            given = {"model": model} if model is not None and model != SCRIPTED else None
            config = load_config(task.workspace, persona=found.layer(), overrides=given)
        except ConfigError as exc:
            raise fail(f"{tasks_file}:{task.line}: {exc}") from None
        if model == SCRIPTED:
            continue  # each task's script is checked with the manifest
        if not config.model:
            raise fail(
                f"no model for task {task.id!r}: pass --model (e.g. --model openai:gpt-4o-mini, or "
                "--model scripted to play each task's script), or set STEWARD_MODEL"
            )
        try:
            Agent(config.model, config=config).model.check()
        except (ConfigError, ModelError) as exc:
            raise fail(f"the model {config.model!r} (task {task.id!r}) cannot work: {exc}") from None
    if model == SCRIPTED:
        _check_scripts(tasks, tasks_file)


def _persona_for(name: str, task: Task) -> Persona:
    """``name`` as an attempt of ``task`` finds it (its template's personas/, the user's, the
    shipped ones); when it does not, where to put it so that every template's attempts do."""
    from steward.errors import ConfigError
    from steward.personas import find_persona, persona_dirs
    from steward.safety.protected import PERSONAS_DIR

    try:
        return find_persona(name, task.workspace)
    except ConfigError as exc:
        user_dir = persona_dirs(task.workspace)[1]
        if not str(exc).startswith("no persona"):
            raise
        here = Path(PERSONAS_DIR, f"{name}.toml")
        seen = ""
        if here.is_file():
            seen = f" ({here} in this folder is not used: the attempts run in copies of their templates)"
        raise ConfigError(
            f"no persona {name!r} for task {task.id!r}{seen}: put {name}.toml in {user_dir} (every "
            f"template's attempts see it) or in {task.workspace / PERSONAS_DIR}; "
            "`steward personas list` shows the personas there are"
        ) from None


def _check_scripts(tasks: list[Task], tasks_file: Path) -> None:
    """Each task's scripted replies parse: a broken script would fail each of its attempts, after
    all of them were queued."""
    from steward.errors import ScriptError
    from steward.models.scripted import load_script

    checked: set[Path] = set()
    for task in tasks:
        for script in (s for s in task.scripts if s not in checked):
            checked.add(script)
            try:
                load_script(script)
            except ScriptError as exc:
                raise fail(f"{tasks_file}:{task.line}: {exc}") from None


def _configured_store() -> str | None:
    """The store the configuration here names (``[store] url`` or ``STEWARD_DB``), if any."""
    from steward.config import load_config

    return load_config(Path.cwd()).store.url or None


async def _run(manifest: Manifest, workers: int, url: str, *, fresh: bool = False) -> int:
    from rich.console import Console

    from steward.batch.follow import Follower
    from steward.batch.plan import queue_all
    from steward.batch.report import write_report, write_trajectories
    from steward.jobs.api import Queue

    console = Console(stderr=True)
    stop, now = asyncio.Event(), asyncio.Event()
    try:
        opened = await Queue.open(url)
    except BaseException:
        if fresh:  # nothing was queued: the same -o works again once the store does
            manifest.forget()
        raise
    async with opened as queue, _stopping_on_signals(stop, now, console):
        typer.echo(
            f"steward: batch {manifest.id} in {manifest.directory} (store {queue.store.where})", err=True
        )
        await queue_all(manifest, queue, lambda _a: None, stop.is_set)
        if workers == 0:
            await _say_if_nobody_serves(queue, manifest)
        follower = Follower(
            manifest,
            queue.store,
            lambda problem: console.print(f"steward: {problem}", markup=False, soft_wrap=True),
        )
        async with _workers(queue, manifest, workers, now):
            finished = await _follow(follower, stop, console, _store_prefix(url, manifest))
        rows, total = write_report(manifest, follower.outcomes)
        written = await write_trajectories(manifest, follower.outcomes, queue.store)
    _print_table(manifest, rows, total)
    _say_why_runs_failed(list(follower.outcomes.values()))
    where = manifest.directory
    typer.echo(
        f"steward: report in {where / 'report.md'} and report.json; "
        f"{written} trajectories in {where / 'trajectories'}",
        err=True,
    )
    if finished:
        return EXIT_OK
    typer.echo(
        f"steward: stopped with {total['settled']} of {total['attempts']} attempts settled; "
        f"`steward batch --resume {where}` goes on with the rest (nothing runs twice)",
        err=True,
    )
    return EXIT_INTERRUPTED


def _say_why_runs_failed(outcomes: list[Outcome]) -> None:
    """Attempts whose run failed (a model key missing, a provider down) say why, once per reason:
    a pass@k of 0 should not hide a setup problem."""
    reasons: dict[str, int] = {}
    for outcome in outcomes:
        if outcome.job_status in ("failed", "dead") and outcome.end_status is None and outcome.error:
            reasons[outcome.error] = reasons.get(outcome.error, 0) + 1
    for reason, count in list(reasons.items())[:3]:
        typer.echo(f"steward: {count} attempt(s) failed before their run ended: {reason}", err=True)


async def _say_if_nobody_serves(queue: Queue, manifest: Manifest) -> None:
    """With --workers 0 the fleet runs the jobs: say so when no worker of it serves the persona."""
    from steward.jobs import presence

    if not await presence.serving(queue.store.engine, manifest.persona):
        typer.echo(
            f"steward: no worker serves role {manifest.persona!r} in this store yet; the attempts wait "
            f"until one starts (`steward worker --role {manifest.persona}`, STEWARD_DB naming the same "
            "store), or run the batch with --workers N",
            err=True,
        )


@contextlib.asynccontextmanager
async def _stopping_on_signals(
    stop: asyncio.Event, now: asyncio.Event, console: Console
) -> AsyncIterator[None]:
    """The first signal stops following (runs finish their step), a second one stops them at once."""
    loop = asyncio.get_running_loop()

    def stopping() -> None:
        if stop.is_set():
            now.set()
            return
        stop.set()
        console.print(
            "steward: stopping: running jobs finish their step and go back to the queue "
            "(signal again to stop them at once)",
            markup=False,
            soft_wrap=True,
        )

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping)
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


@contextlib.asynccontextmanager
async def _workers(queue: Queue, manifest: Manifest, slots: int, now: asyncio.Event) -> AsyncIterator[None]:
    """A worker of this process taking the batch's persona's jobs, ``slots`` at once (none for 0).
    On the way out it stops claiming; runs still going reach their next step and go back."""
    if slots == 0:
        yield
        return
    from steward.jobs.worker import Worker, WorkerSettings

    done = asyncio.Event()
    worker = Worker(queue.store, WorkerSettings(roles=(manifest.persona,), concurrency=slots))
    running = asyncio.create_task(worker.run(done, now))
    try:
        yield
    finally:
        done.set()
        await running


def _store_prefix(url: str, manifest: Manifest) -> str:
    """What to put before a ``steward`` command so that it reads the batch's store: nothing when
    that is the store configured here, else ``STEWARD_DB=URL `` (by default the batch's own
    ``DIR/steward.db``, which commands run in this folder do not read)."""
    import shlex

    return "" if url == _configured_store() else f"STEWARD_DB={shlex.quote(manifest.store)} "


async def _follow(follower: Follower, stop: asyncio.Event, console: Console, prefix: str) -> bool:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    told_waiting = False
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    bar = progress.add_task("batch", total=len(follower.manifest.runs))

    def show(counts: Counts) -> None:
        nonlocal told_waiting
        parts = [f"passed {counts.passed}", f"failed {counts.failed}", f"running {counts.running}"]
        parts += [f"queued {counts.queued}"] + ([f"waiting {counts.waiting}"] if counts.waiting else [])
        parts += [f"verifying {counts.verifying}"] if counts.verifying else []
        progress.update(bar, completed=counts.settled, description=" · ".join(parts))
        if counts.waiting and not told_waiting:
            told_waiting = True
            progress.console.print(
                f"steward: {counts.waiting} attempt(s) wait for a person: "
                f"`{prefix}steward jobs list --status waiting` shows them; `{prefix}steward approve|answer "
                "JOB` lets them go on (or run the batch with --mode autonomous)",
                markup=False,
                soft_wrap=True,
            )

    with progress:
        return await follower.follow(stop, show)


def _print_table(manifest: Manifest, rows: list[TaskFigures], total: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    from steward.batch.report import MEANS, headers, ratio, table_rows

    table = Table(
        title=f"batch {manifest.id}: {manifest.persona} on {manifest.model or 'the configured model'}"
    )
    for name in headers(manifest):
        if name == "task":  # a long task id folds onto a second line; a figure is never cut
            table.add_column(name, justify="left", overflow="fold", min_width=8)
        else:
            table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    for cells in table_rows(manifest, rows):
        table.add_row(*cells)
    k = manifest.attempts
    at_k = f" · pass@{k} {ratio(total[f'pass@{k}'])}" if k > 1 else ""
    settled = f"{total['settled']}/{total['attempts']} attempts settled"
    table.caption = f"pass@1 {ratio(total['pass@1'])}{at_k} · {settled}\n{MEANS}"
    console = Console()
    if not console.is_terminal:
        # A pipe or a file has no width of its own: the table keeps its whole width there
        # (rich would cut it to 80 columns, and the time column's figures to "2.2…").
        natural = Measurement.get(console, console.options.update(max_width=10_000), table).maximum
        console = Console(width=max(console.width, natural))
    console.print(table)
