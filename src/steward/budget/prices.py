"""What a model's tokens cost: per-million-token rates from config or the ``genai-prices`` table.

Rates are looked up once per model and kept (a lookup in the table takes far longer than a
step's accounting may). A model the table does not know, with no ``[prices."provider:model"]``
entry, has no price: its cost is unknown (``None``), and a budget in money refuses to start.
Scripted and local models (``scripted:``, ``ollama:``) cost nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from steward.models.base import Usage

_MTOK = 1_000_000
#: Providers whose models run on this machine or from a script: no money changes hands.
FREE_PROVIDERS = frozenset({"scripted", "ollama"})
#: How Steward's provider prefixes are named in the price table.
_TABLE_PROVIDER = {"openai": "openai", "anthropic": "anthropic"}


class PriceEntry(Protocol):
    """A ``[prices."provider:model"]`` entry of the configuration (``steward.config``)."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None
    cache_write_per_mtok: float | None


@dataclass(frozen=True, slots=True)
class Rates:
    """US dollars per million tokens of each kind."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float
    cache_write_per_mtok: float

    def cost(self, usage: Usage) -> float:
        """The price of ``usage`` (its input counts the cached parts too: they are priced as such)."""
        fresh = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
        total = (
            fresh * self.input_per_mtok
            + usage.cache_read_tokens * self.cached_input_per_mtok
            + usage.cache_write_tokens * self.cache_write_per_mtok
            + usage.output_tokens * self.output_per_mtok
        )
        return total / _MTOK


FREE = Rates(0.0, 0.0, 0.0, 0.0)


def rates_for(model: str, overrides: Mapping[str, PriceEntry]) -> Rates | None:
    """The rates of ``model`` (``provider:model``): the configuration's, else the table's; None:
    unknown."""
    entry = overrides.get(model)
    if entry is not None:
        cached = entry.cached_input_per_mtok
        write = entry.cache_write_per_mtok
        return Rates(
            entry.input_per_mtok,
            entry.output_per_mtok,
            entry.input_per_mtok if cached is None else cached,
            entry.input_per_mtok if write is None else write,
        )
    provider, sep, name = model.partition(":")
    if provider in FREE_PROVIDERS:
        return FREE
    if not sep or provider not in _TABLE_PROVIDER:
        return None
    return _from_table(_TABLE_PROVIDER[provider], name)


@functools.cache
def _from_table(provider_id: str, name: str) -> Rates | None:
    try:
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price
    except ImportError:  # installed without it: every model's price is unknown
        return None

    def dollars(**tokens: int) -> float:
        return float(calc_price(PriceUsage(**tokens), name, provider_id=provider_id).total_price)

    try:
        # Per-million rates, read at the first tier: prices that rise past a context length
        # (a few long-context models) are taken at their base rate.
        return Rates(
            input_per_mtok=dollars(input_tokens=_MTOK),
            output_per_mtok=dollars(output_tokens=_MTOK),
            cached_input_per_mtok=dollars(input_tokens=_MTOK, cache_read_tokens=_MTOK),
            cache_write_per_mtok=dollars(input_tokens=_MTOK, cache_write_tokens=_MTOK),
        )
    except (LookupError, ValueError):
        return None


def unknown_price(model: str) -> str:
    """What to write to give ``model`` a price."""
    return (
        f'no price is known for {model}: add [prices."{model}"] with input_per_mtok and '
        "output_per_mtok (US dollars per million tokens) to steward.toml"
    )
