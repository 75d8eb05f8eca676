"""The request budget in characters: the one place tokens become characters.

Budgets are configured in tokens (``limits.request_token_budget``) but text is measured in
characters. Every part that sizes text against the budget (the request builder, session
history, tool discovery, fold summaries) converts here, with ``DEFAULT_CHARS_PER_TOKEN`` until
a run has calibrated its own ratio from the provider's reported usage.
"""

from __future__ import annotations

DEFAULT_CHARS_PER_TOKEN = 3.5


def budget_chars(tokens: int, share: float = 1.0, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    """The characters ``share`` of a budget of ``tokens`` holds at ``chars_per_token``."""
    return int(tokens * share * chars_per_token)


def fold_summary_limit(budget: int) -> int:
    """The length asked of a fold's summary at a budget of ``budget`` chars (twice it is kept)."""
    return min(4_000, max(800, budget // 10))
