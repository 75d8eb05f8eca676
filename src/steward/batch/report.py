"""A batch's report: per task, pass@1 and pass@k, mean steps, tokens, cost and time, written to
``report.json`` and ``report.md`` in the batch's directory, and each attempt's trajectory in
``trajectories/<task>.jsonl`` (the attempts of one task together: a group, as GRPO-style
training takes them), its reward set from the attempt's verdict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import fmean
from typing import TYPE_CHECKING, Any

from steward.atomic import write_atomic
from steward.batch.passk import pass_at_k
from steward.batch.plan import Manifest

if TYPE_CHECKING:
    from steward.batch.follow import Outcome
    from steward.batch.tasks import Task
    from steward.store.events import EventStore


@dataclass(frozen=True, slots=True)
class TaskFigures:
    task: str
    attempts: int  # settled so far
    passed: int
    pass_at: dict[int, float]  # k -> pass@k, for k from 1 to the attempts settled
    mean_steps: float | None
    mean_tokens: float | None
    cost_usd: float | None  # all its attempts together; None when no cost was recorded
    mean_seconds: float | None


def task_figures(task: str, outcomes: Sequence[Outcome]) -> TaskFigures:
    n, c = len(outcomes), sum(o.passed for o in outcomes)
    costs = [o.cost_usd for o in outcomes if o.cost_usd is not None]
    seconds = [o.seconds for o in outcomes if o.seconds is not None]
    return TaskFigures(
        task=task, attempts=n, passed=c, pass_at={k: pass_at_k(n, c, k) for k in range(1, n + 1)},
        mean_steps=fmean(o.steps for o in outcomes) if n else None,
        mean_tokens=fmean(o.tokens for o in outcomes) if n else None,
        cost_usd=sum(costs) if costs else None, mean_seconds=fmean(seconds) if seconds else None,
    )  # fmt: skip


def figures(manifest: Manifest, outcomes: dict[str, Outcome]) -> list[TaskFigures]:
    """Each task's figures, in the task file's order, from the attempts settled so far."""
    by_task: dict[str, list[Outcome]] = {t.id: [] for t in manifest.tasks}
    for attempt in manifest.runs:
        if (found := outcomes.get(attempt.key)) is not None:
            by_task[attempt.task].append(found)
    return [task_figures(task, found) for task, found in by_task.items()]


def summary(manifest: Manifest, rows: Sequence[TaskFigures]) -> dict[str, Any]:
    """The batch as a whole: pass@1 and pass@K averaged over the tasks that have enough attempts."""
    k = manifest.attempts

    def mean_pass(at: int) -> float | None:
        values = [r.pass_at[at] for r in rows if at in r.pass_at]
        return fmean(values) if values else None

    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    settled = sum(r.attempts for r in rows)
    return {
        "tasks": len(rows), "attempts": len(manifest.runs), "settled": settled,
        "complete": settled == len(manifest.runs), "passed": sum(r.passed for r in rows),
        "pass@1": mean_pass(1), f"pass@{k}": mean_pass(k), "cost_usd": sum(costs) if costs else None,
    }  # fmt: skip


def write_report(
    manifest: Manifest, outcomes: dict[str, Outcome]
) -> tuple[list[TaskFigures], dict[str, Any]]:
    """``report.json`` and ``report.md``; the figures and the summary they hold."""
    rows = figures(manifest, outcomes)
    total = summary(manifest, rows)
    settled = [outcomes[a.key] for a in manifest.runs if a.key in outcomes]
    body = {
        "batch": manifest.id, "tasks_file": manifest.tasks_file, "persona": manifest.persona,
        "model": manifest.model, "mode": manifest.mode, "attempts_per_task": manifest.attempts,
        "budget_per_attempt": manifest.budget, "store": manifest.store, "summary": total,
        "tasks": [asdict(r) for r in rows],
        "attempts": [asdict(o) for o in settled],
    }  # fmt: skip
    write_atomic(manifest.directory / "report.json", json.dumps(body, indent=1) + "\n")
    write_atomic(manifest.directory / "report.md", markdown(manifest, rows, total, settled))
    return rows, total


def table_rows(manifest: Manifest, rows: Sequence[TaskFigures]) -> list[list[str]]:
    """The summary table's cells: task, passed, pass@1, pass@K (when K > 1), steps, tokens, cost, time."""
    k = manifest.attempts
    return [
        [
            r.task,
            f"{r.passed}/{r.attempts}",
            ratio(r.pass_at.get(1)),
            *([ratio(r.pass_at.get(k))] if k > 1 else []),
            _number(r.mean_steps, "{:.1f}"),
            _number(r.mean_tokens, "{:,.0f}"),
            _number(r.cost_usd, "${:.4f}"),
            _number(r.mean_seconds, "{:.1f} s"),
        ]
        for r in rows
    ]


MEANS = "steps, tokens and time: the mean of an attempt; cost: all the task's attempts together."


def headers(manifest: Manifest) -> list[str]:
    k = manifest.attempts
    at_k = [f"pass@{k}"] if k > 1 else []
    return ["task", "passed", "pass@1", *at_k, "steps", "tokens", "cost", "time"]


def markdown(
    manifest: Manifest, rows: Sequence[TaskFigures], total: dict[str, Any], settled: Sequence[Outcome]
) -> str:
    k = manifest.attempts
    lines = [
        f"# Batch {manifest.id}",
        "",
        f"{manifest.tasks_file}: {total['tasks']} tasks x {k} attempt(s), persona {manifest.persona}, "
        f"model {manifest.model or '(as configured)'}; "
        f"{total['settled']} of {total['attempts']} attempts settled.",
        "",
        "| " + " | ".join(headers(manifest)) + " |",
        "|" + "---|" * len(headers(manifest)),
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in table_rows(manifest, rows)]
    lines += ["", MEANS]
    at_k = f", pass@{k} {ratio(total[f'pass@{k}'])}" if k > 1 else ""
    lines += ["", f"pass@1 {ratio(total['pass@1'])}{at_k} (mean over tasks)", ""]
    if settled:
        lines += [
            "## Attempts",
            "",
            "| task | attempt | job | run | verifier | passed | error |",
            "|---" * 7 + "|",
        ]
        lines += [_attempt_row(o) for o in settled]
        lines += ["", "The verifiers' output is in report.json.", ""]
    return "\n".join(lines)


def _attempt_row(outcome: Outcome) -> str:
    """One attempt as a table row: its job, how its run ended, the verifier's exit code, why it failed."""
    match outcome.verify:
        case None:
            verifier = "-"
        case {"exit_code": int(code)}:
            verifier = f"exit {code}"
        case _:  # timed out, or could not start
            verifier = "no exit code"
    cells = [
        outcome.task, str(outcome.attempt), outcome.job, outcome.end_status or outcome.job_status, verifier,
        "yes" if outcome.passed else "no", _one_line(outcome.error or "", 160).replace("|", "\\|"),
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


async def write_trajectories(manifest: Manifest, outcomes: dict[str, Outcome], store: EventStore) -> int:
    """Each settled attempt's trajectory (``steward.trajectories.chat_record``: OpenAI chat format),
    one JSON line, grouped in one file per task, the verifier's verdict as its reward; and
    ``tasks.jsonl``, one row per task as GRPO trainers take it (prompt, verifier, the template, the
    attempts' rewards). How many trajectories were written."""
    from steward.errors import StewardError
    from steward.trajectories import chat_record

    folder = manifest.directory / "trajectories"
    folder.mkdir(parents=True, exist_ok=True)
    rows, written = [], 0
    for task in manifest.tasks:
        lines, runs, rewards = [], [], []
        for attempt in (a for a in manifest.runs if a.task == task.id and a.key in outcomes):
            outcome = outcomes[attempt.key]
            try:
                record = await chat_record(store, outcome.job)
            except StewardError:  # its run never started (cancelled first): no trajectory to give
                continue
            if task.verify is not None:  # the batch's verifier decides, as it decided "passed"
                record |= {"reward": float(outcome.passed), "reward_source": "verifier"}
            record |= {
                "task": task.id,
                "attempt": attempt.number,
                "passed": outcome.passed,
                # A JSON string ("null": no verifier): datasets gives a column the type it has in
                # the first file read, and a null there refuses an object in the next task's file.
                "verdict": json.dumps(outcome.verify, ensure_ascii=False),
            }
            lines.append(json.dumps(record, ensure_ascii=False))
            runs.append(outcome.job)
            rewards.append(record["reward"])
        write_atomic(folder / f"{task.id}.jsonl", "".join(line + "\n" for line in lines))
        written += len(lines)
        rows.append(_task_row(task, runs, rewards))
    write_atomic(manifest.directory / "tasks.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    return written


def _task_row(task: Task, runs: list[str], rewards: list[float]) -> dict[str, Any]:
    """A task as ``steward runs export --format tasks`` gives one (``steward.trajectories.tasks``)."""
    return {
        "prompt": [{"role": "user", "content": task.goal}], "task": task.id, "goal": task.goal,
        "verify": task.verify or "", "workspace": str(task.workspace), "runs": runs, "rewards": rewards,
        "mean_reward": round(fmean(rewards), 6) if rewards else None,
    }  # fmt: skip
