"""How nested rules are marked inside a tool result, so they outlive its compaction.

A tool result may end with blocks of rules from nested ``AGENTS.md`` files. When the loop
compacts the result, or the context elides it, the blocks are kept: the model was told those
rules once per run, so losing them would lose them for good.
"""

from __future__ import annotations

RULES_MARK = "\n\n[Rules from "


def split_rules(text: str) -> tuple[str, str]:
    """(the result without its rule blocks, the rule blocks) — the second is "" if none."""
    at = text.find(RULES_MARK)
    return (text, "") if at < 0 else (text[:at], text[at:])
