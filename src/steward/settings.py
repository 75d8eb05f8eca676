"""The settings of one run's parts, built from the configuration in one place.

The loop, the request budget and the tools each take a small settings object of their own;
this module is the only place that knows which configuration key feeds which of them.
"""

from __future__ import annotations

from steward.config import Config, Limits
from steward.context import BudgetSettings
from steward.run_state import LoopSettings
from steward.tools.base import ToolSettings


def loop_settings(config: Config, limits: Limits | None = None) -> LoopSettings:
    lim = limits or config.limits  # an agent may be given its own
    return LoopSettings(
        max_steps=lim.max_steps,
        max_output_tokens=lim.max_output_tokens,
        repeat_warning=lim.repeat_warning,
        repeat_stop=lim.repeat_stop,
        tool_timeout_s=lim.tool_timeout_s,
        model_retries=lim.model_retries,
        model_retry_backoff_s=lim.model_retry_backoff_s,
        approval_timeout_s=config.policy.approval_timeout_s,
        approval_default=config.policy.on_timeout,
        compact_output_chars=lim.compact_output_chars,
        compact_skip_tools=frozenset(lim.compact_skip_tools),
        summarize_turns=lim.summarize_turns,
        summarize_failed_attempts=lim.summarize_failed_attempts,
        run_timeout_s=lim.run_timeout_s,
    )


def budget_settings(config: Config, limits: Limits | None = None) -> BudgetSettings:
    lim = limits or config.limits  # an agent may be given its own
    return BudgetSettings(lim.request_token_budget, lim.observation_share, lim.keep_recent_observations)


def tool_settings(config: Config, limits: Limits | None = None) -> ToolSettings:
    lim = limits or config.limits  # an agent may be given its own
    return ToolSettings(
        bash_timeout_s=lim.bash_timeout_s,
        output_cap_chars=lim.output_cap_chars,
        read_cap_chars=lim.read_cap_chars,
        allowed_domains=tuple(config.sandbox.allowed_domains),
        secret_files=tuple(config.sandbox.secret_files),
    )
