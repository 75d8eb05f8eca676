"""The Anthropic provider's guarantees for every step, over a real socket against the fake server.

The whole call is bounded by ``timeout``; a stream cut short is a retryable failure, never a
reply; the SDK's retries and the loop's ``RetryingModel`` do not multiply; a reply without
usage gets an estimate, marked; ``max_tokens`` goes out with every request of a run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from steward import Agent
from steward.config import load_config
from steward.errors import ModelError
from steward.models.base import Model, ModelRequest, Retrying, UserMessage
from steward.models.retry import RetryingModel
from steward.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall

from .conftest import Collect, MakeAnthropic, Streamed

# An upper bound a correct program never reaches: it only keeps a broken one from hanging.
NEVER = 60.0

END = FakeToolCall(
    "agent_step",
    {"phase": "end", "summary": "Answered", "end_status": "solved", "end_message": "All done."},
)


def ask(text: str = "hi") -> ModelRequest:
    return ModelRequest(system="Be brief.", messages=[UserMessage(text)])


async def bounded_collect(collect: Collect, model: Model, request: ModelRequest) -> Streamed:
    return await asyncio.wait_for(collect(model, request), NEVER)


# --- one deadline for the whole call --------------------------------------------------------


async def test_a_reply_that_trickles_forever_fails_with_the_timeout_error(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    # An event every 50 ms never leaves a gap the SDK's timeout would see: only the bound on
    # the whole call can end this reply.
    server.add(FakeReply(text="and so on ", trickle=0.05))
    with pytest.raises(
        ModelError, match=r"anthropic: no reply from .* within 0\.5s\. Raise timeout_s"
    ) as caught:
        await bounded_collect(collect, make_anthropic(timeout=0.5), ask())
    assert caught.value.retryable
    assert len(server.requests) == 1


# --- a stream cut short ---------------------------------------------------------------------


@pytest.mark.parametrize("events", [0, 2])
async def test_a_stream_cut_short_is_a_retryable_error_not_a_reply(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect, events: int
) -> None:
    server.add(FakeReply(text="Two chunks then a closed socket.", piece=4, cut_after=events))
    with pytest.raises(
        ModelError, match=r"anthropic: the reply from .* broke off after \d+ events"
    ) as caught:
        await bounded_collect(collect, make_anthropic(), ask())
    assert caught.value.retryable


async def test_the_loop_retries_a_cut_stream_and_gets_the_good_reply(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="Half an ans", cut_after=3), FakeReply(text="The whole answer."))
    retrying = RetryingModel(make_anthropic(), retries=2, backoff_s=0)
    streamed = await bounded_collect(collect, retrying, ask())
    assert streamed.response.message.text == "The whole answer."
    assert sum(isinstance(d, Retrying) for d in streamed.deltas) == 1
    assert len(server.requests) == 2


# --- one retry layer, not two ---------------------------------------------------------------


async def test_status_errors_the_sdk_retried_are_not_retried_again_by_the_loop(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(*[FakeReply.error(529, headers={"retry-after-ms": "1"})] * 9)
    retrying = RetryingModel(make_anthropic(max_retries=2), retries=2, backoff_s=0)
    with pytest.raises(ModelError, match=r"overloaded \(529\) after 2 retries"):
        await bounded_collect(collect, retrying, ask())
    assert len(server.requests) == 3, "the SDK's three tries, not three times three"


async def test_a_rejected_request_is_sent_once(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(*[FakeReply.error(400, "messages.0.content: Field required")] * 3)
    retrying = RetryingModel(make_anthropic(max_retries=2), retries=2, backoff_s=0)
    with pytest.raises(ModelError, match=r"rejected \(400\): messages\.0\.content: Field required"):
        await bounded_collect(collect, retrying, ask())
    assert len(server.requests) == 1


async def test_a_request_the_server_calls_invalid_is_sent_once_even_under_a_500(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    # A proxy in front of a local server answers its validation errors with 500.
    invalid = "1 validation error: messages.1.content Input should be a valid string"
    server.add(*[FakeReply.error(500, invalid)] * 3)
    retrying = RetryingModel(make_anthropic(max_retries=2), retries=2, backoff_s=0)
    with pytest.raises(
        ModelError, match=r"rejected \(500\): 1 validation error.*so it was sent once"
    ) as caught:
        await bounded_collect(collect, retrying, ask())
    assert not caught.value.retryable
    assert len(server.requests) == 1


async def test_the_same_server_error_twice_is_not_sent_a_third_time(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(*[FakeReply.error(500, "boom", headers={"retry-after-ms": "1"})] * 4)
    retrying = RetryingModel(make_anthropic(max_retries=3), retries=2, backoff_s=0)
    with pytest.raises(ModelError, match=r"server error \(500\), the same twice for the same request"):
        await bounded_collect(collect, retrying, ask())
    assert len(server.requests) == 2


async def test_a_wait_the_call_has_no_time_for_is_not_waited(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    # The server asks for 50 s; the call may take 5: the rate limit is reported at once.
    server.add(FakeReply.error(429, headers={"retry-after": "50"}), FakeReply(text="too late"))
    with pytest.raises(ModelError, match=r"rate limited \(429\)") as caught:
        await bounded_collect(collect, make_anthropic(max_retries=2, timeout=5.0), ask())
    assert len(server.requests) == 1
    assert caught.value.retry_after == 50, "the wait the server asked for goes with the failure"


async def test_an_error_inside_a_started_stream_is_left_to_the_loop(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    # The SDK cannot retry a stream that had started: the loop's retry is the only one.
    server.add(FakeReply(text="partial", stream_error="overloaded_error"), FakeReply(text="Fine now."))
    retrying = RetryingModel(make_anthropic(max_retries=2), retries=2, backoff_s=0)
    streamed = await bounded_collect(collect, retrying, ask())
    assert streamed.response.message.text == "Fine now."
    assert len(server.requests) == 2


# --- usage ----------------------------------------------------------------------------------


async def test_a_reply_without_usage_gets_an_estimate_marked_as_such(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="A reply from a proxy that strips usage.", usage=False))
    usage = (await bounded_collect(collect, make_anthropic(), ask("How are you?"))).response.usage
    assert usage.estimated
    assert usage.input_tokens > 0 and usage.output_tokens > 0 and usage.requests == 1


async def test_reported_usage_is_not_marked_estimated(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="ok", input_tokens=20, output_tokens=3))
    usage = (await bounded_collect(collect, make_anthropic(), ask())).response.usage
    assert not usage.estimated
    assert (usage.input_tokens, usage.output_tokens) == (20, 3)


# --- whole runs: max_tokens from the configuration, cut streams -----------------------------


def workspace(tmp_path: Path, server: FakeLLMServer, *, model_retries: int = 2) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "steward.toml").write_text(
        'model = "anthropic:claude-test"\n'
        "[models.anthropic]\n"
        f'base_url = "{server.anthropic_base_url}"\n'
        "max_retries = 0\n"
        "timeout_s = 30\n"
        "[limits]\n"
        "max_output_tokens = 321\n"
        f"model_retries = {model_retries}\n"
        "model_retry_backoff_s = 0\n"
    )
    return ws


async def run_in(ws: Path, goal: str = "Say hello.") -> tuple[str, str | None, str]:
    agent = Agent(config=load_config(ws, user_file=ws / "no-user-config.toml"), sandbox=False)
    try:
        run = agent.start(goal, workspace=ws)

        async def drain() -> None:
            async for _ in run.stream():
                pass

        await asyncio.wait_for(drain(), NEVER)
        result = run.snapshot()
    finally:
        await agent.aclose()
    return result.status, result.end_status, result.output


async def test_every_request_of_a_run_carries_the_configured_max_output_tokens(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    ws = workspace(tmp_path, server)
    server.add(FakeReply(text="Hel", cut_after=2), FakeReply(text="Hello.", tool_calls=[END]))
    assert await run_in(ws) == ("done", "solved", "All done.")
    assert [r.body["max_tokens"] for r in server.requests] == [321, 321]


async def test_a_run_whose_every_reply_is_cut_ends_failed(server: FakeLLMServer, tmp_path: Path) -> None:
    ws = workspace(tmp_path, server, model_retries=1)
    server.add(FakeReply(text="Hel", cut_after=2), FakeReply(text="Hel", cut_after=2))
    status, end_status, output = await run_in(ws)
    assert (status, end_status) == ("failed", None)
    assert "broke off after" in output
    assert len(server.requests) == 2
