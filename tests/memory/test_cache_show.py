"""`steward runs show` sums up what the model cache did in a run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from steward import Agent
from steward.config import CacheSettings, Config
from steward.memory.cache import cached_model
from steward.models.scripted import ScriptedModel
from steward.store.events import open_store

REPLIES: list[dict[str, Any]] = [
    {"tool": "list_dir", "args": {"path": "."}},
    {"agent_step": {"phase": "end", "summary": "s", "end_status": "solved", "end_message": "one file"}},
]


async def test_runs_show_prints_hits_misses_and_tokens_saved(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    config = Config(cache=CacheSettings(exact=True))
    run_ids = []
    async with await open_store(f"sqlite:///{tmp_path / '.steward' / 'steward.db'}") as store:
        for _ in range(2):
            model = cached_model(ScriptedModel.from_data(REPLIES), config, store.engine, None)
            agent = Agent(model, config=config, store=store, sandbox=False)
            run_ids.append((await agent.run("what is here?", workspace=tmp_path)).run.id)
            await agent.aclose()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")

    def show(run_id: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "steward", "runs", "show", run_id, "-w", str(tmp_path)],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    first, second = show(run_ids[0]), show(run_ids[1])
    assert "cache: 0 hits, 2 misses" in first and "model cache miss (exact)" in first
    assert "model cache hit (exact)" in second
    assert re.search(r"^cache: 2 hits \(exact 2\), 0 misses, ~[0-9,]+ tokens saved$", second, re.M)
