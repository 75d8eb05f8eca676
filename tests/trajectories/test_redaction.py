"""A secret of the workspace never reaches an exported trajectory: not from the goal, the system
prompt, a tool's schema, a call's arguments nor a tool's output."""

from __future__ import annotations

import json
from pathlib import Path

from tests.trajectories.scenarios import scripted, step

from steward.agent import Agent
from steward.config import Config, Limits
from steward.store.events import EventStore
from steward.tools.base import tool
from steward.trajectories import chat_record

SECRET = "vaultTok7Qx2Lp9Vw3Kz8Hq"


async def test_every_part_of_a_trajectory_is_redacted(store: EventStore, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"VAULT_TOKEN={SECRET}\n")
    lookup = tool(name="lookup", description=f"Look a key up in the vault opened with {SECRET}.")(_lookup)
    replies = [
        [("write_file", {"path": "token.txt", "content": f"token {SECRET}\n"})],
        [("read_file", {"path": "token.txt"})],
        [("lookup", {"key": SECRET})],
        [step("end", end_status="solved", end_message=f"The token is {SECRET}.")],
    ]
    agent = Agent(scripted(replies), tools=[lookup], config=Config(limits=Limits(max_steps=10)), sandbox=False,
                  store=store, instructions=f"The vault token is {SECRET}.")  # fmt: skip
    started = agent.start(f"check that {SECRET} opens the vault", workspace=tmp_path)
    await started.result()
    record = await chat_record(store, started.id)
    text = json.dumps(record, ensure_ascii=False)
    assert SECRET not in text
    assert "redacted" in record["messages"][0]["content"]  # the system prompt held it
    assert "redacted" in record["messages"][1]["content"]  # so did the goal
    described = next(t for t in record["tools"] if t["function"]["name"] == "lookup")
    assert "redacted" in described["function"]["description"]
    outputs = [m["content"] for m in record["messages"] if m["role"] == "tool"]
    assert any("token [redacted" in out for out in outputs)
    assert "redacted" in record["run"]["final_message"]


def _lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"no entry for {key}"
