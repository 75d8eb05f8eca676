"""The rules' part of the static system prompt."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from steward.rules.agents_md import linked_docs, root_rules, topics_section
from steward.rules.skills import find_skills, skills_section
from steward.tools._paths import workspace_root

if TYPE_CHECKING:
    from steward.config import RulesSettings


def rules_prompt(workspace: Path, settings: RulesSettings) -> str:
    """The root AGENTS.md (capped), the topics of the documents it links and the skills' names
    and descriptions, as one prompt section; "" when there is none of these.

    The same files always give the same text (runs rebuilt from their log compare prompts),
    and nothing here raises for a missing workspace or a broken, binary or huge file.
    """
    root = workspace_root(workspace)
    parts: list[str] = []
    if settings.agents_md:
        parts.append(root_rules(root, settings.max_chars))
        parts.append(topics_section(linked_docs(root)))
    parts.append(skills_section(find_skills(workspace, settings)))
    return "\n\n".join(part for part in parts if part)
