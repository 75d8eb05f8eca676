"""``Agent.open``: the one way an entry point opens an agent from its configuration."""

from __future__ import annotations

from pathlib import Path

import yaml

from steward import Agent, load_config
from steward.store.events import open_store


def scripted(tmp_path: Path, *replies: object) -> str:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(list(replies)))
    return f"scripted:{script}"


async def test_an_opened_agent_records_its_runs_in_the_workspace_store(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text(f'model = "{scripted(tmp_path, {"text": "done"})}"\n')
    agent = await Agent.open(load_config(tmp_path), workspace=tmp_path)
    try:
        assert agent.store is not None  # given at construction, not assigned afterwards
        assert agent.config_file == tmp_path.resolve() / "steward.toml"
        result = await agent.run("what is done?", workspace=tmp_path)
        assert result.answered and result.output == "done"
    finally:
        await agent.aclose()
    database = tmp_path / ".steward" / "steward.db"
    assert database.is_file()
    async with await open_store(f"sqlite:///{database}") as store:  # the agent closed its own
        runs = await store.runs()
        assert [r.id for r in runs] == [result.run.id] and runs[0].status == "done"


async def test_a_shared_store_stays_open_for_its_owner(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    async with await open_store(url) as store:
        config = load_config(tmp_path)
        first = await Agent.open(
            config, workspace=tmp_path, model=scripted(tmp_path, {"text": "one"}), store=store
        )
        await first.run("first?", workspace=tmp_path)
        await first.aclose()
        second = await Agent.open(
            config, workspace=tmp_path, model=scripted(tmp_path, {"text": "two"}), store=store
        )
        result = await second.run("second?", workspace=tmp_path)  # the store is still open
        await second.aclose()
        assert result.output == "two"
        assert len(await store.runs()) == 2
    assert not (tmp_path / ".steward" / "steward.db").exists()  # the configured store was not opened
