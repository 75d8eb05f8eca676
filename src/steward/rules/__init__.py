"""Project rules and skills for the agent (seed 001's three tiers of AGENTS.md, plus skills).

``rules_prompt`` is the section of the static system prompt: the root AGENTS.md, the topics
of the documents it links and the skills' names. ``RulesToolset`` wraps the tools: it adds
``load_skill``, ``find_skill`` (skills and the files their SKILL.md links, searched) and
``read_rules``, and appends a nested AGENTS.md to the result of the first file tool call that
touches its subtree. With an embedder, ``find_skill`` and ``read_rules`` fuse their keyword
ranking with one by meaning.
"""

from steward.rules._prompt import rules_prompt
from steward.rules._toolset import RulesToolset
from steward.rules.skills import Skill, SkillScan, find_skills, skill_warnings

__all__ = ["RulesToolset", "Skill", "SkillScan", "find_skills", "rules_prompt", "skill_warnings"]
