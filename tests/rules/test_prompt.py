"""rules_prompt: the root AGENTS.md, the linked topics and the skills, safely and always the same."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from steward.config import RulesSettings
from steward.rules import rules_prompt

Write = Callable[[Path, str], Path]


def test_nothing_to_say_is_an_empty_string(workspace: Path, settings: RulesSettings) -> None:
    assert rules_prompt(workspace, settings) == ""


def test_a_missing_workspace_is_an_empty_string(tmp_path: Path, settings: RulesSettings) -> None:
    assert rules_prompt(tmp_path / "gone", settings) == ""


def test_the_root_agents_md_is_in_the_prompt(workspace: Path, settings: RulesSettings, write: Write) -> None:
    write(workspace / "AGENTS.md", "# Rules\n\nUse tabs, never spaces.\n")
    prompt = rules_prompt(workspace, settings)
    assert prompt.startswith("## Project rules (AGENTS.md)\n\n# Rules")
    assert "Use tabs, never spaces." in prompt


def test_a_long_agents_md_is_cut_at_a_line_and_says_where_to_go_on(workspace: Path, write: Write) -> None:
    lines = [f"rule {n}: " + "x" * 40 for n in range(1, 101)]
    write(workspace / "AGENTS.md", "\n".join(lines) + "\n")
    prompt = rules_prompt(workspace, RulesSettings(max_chars=1000))
    shown = [line for line in prompt.splitlines() if line.startswith("rule ")]
    assert shown == lines[: len(shown)]  # whole lines only
    assert len("\n".join(shown)) <= 1000
    assert (
        f"[AGENTS.md is longer than 1000 characters and was cut here; read the rest with "
        f"read_file(path='AGENTS.md', start_line={len(shown) + 1}).]"
    ) in prompt


def test_the_same_files_give_the_same_prompt(
    workspace: Path, settings: RulesSettings, write: Write, make_skill: Callable[..., Path]
) -> None:
    write(workspace / "AGENTS.md", "Rules. See [Testing](docs/testing.md).\n")
    write(workspace / "docs/testing.md", "# Testing\n")
    for name in ("zeta", "alpha", "mid"):
        make_skill(workspace / ".steward/skills", name, f"The {name} skill.")
    first = rules_prompt(workspace, settings)
    assert first == rules_prompt(workspace, settings)
    assert first.index("- alpha:") < first.index("- mid:") < first.index("- zeta:")


def test_binary_agents_md_is_ignored(workspace: Path, settings: RulesSettings) -> None:
    (workspace / "AGENTS.md").write_bytes(b"\x00\x01\x02binary\xff\xfe")
    assert rules_prompt(workspace, settings) == ""


def test_a_huge_agents_md_is_read_only_as_far_as_the_cap(workspace: Path) -> None:
    (workspace / "AGENTS.md").write_bytes(b"a line of rules\n" * 2_000_000)  # 32 MB
    prompt = rules_prompt(workspace, RulesSettings(max_chars=600))
    assert len(prompt) < 1000 and "was cut here" in prompt


def test_invalid_utf8_does_not_break_the_prompt(workspace: Path, settings: RulesSettings) -> None:
    (workspace / "AGENTS.md").write_bytes(b"Rules \xe9t\xe9 here\n")
    assert "Rules \ufffdt\ufffd here" in rules_prompt(workspace, settings)


def test_agents_md_symlinked_outside_the_workspace_is_ignored(
    workspace: Path, tmp_path: Path, settings: RulesSettings, write: Write
) -> None:
    secret = write(tmp_path / "outside" / "secret.md", "TOP SECRET")
    (workspace / "AGENTS.md").symlink_to(secret)
    assert rules_prompt(workspace, settings) == ""


def test_an_unreadable_agents_md_is_ignored(workspace: Path, settings: RulesSettings, write: Write) -> None:
    rules = write(workspace / "AGENTS.md", "hidden")
    rules.chmod(0)
    try:
        if os.access(rules, os.R_OK):  # root reads anything: nothing to test then
            return
        assert rules_prompt(workspace, settings) == ""
    finally:
        rules.chmod(0o644)


def test_agents_md_false_leaves_agents_md_out_but_keeps_skills(
    workspace: Path, write: Write, make_skill: Callable[..., Path]
) -> None:
    write(workspace / "AGENTS.md", "Use tabs. See [Testing](docs/testing.md).")
    write(workspace / "docs/testing.md", "# Testing")
    make_skill(workspace / ".steward/skills", "deploy", "Ship a release.")
    prompt = rules_prompt(workspace, RulesSettings(agents_md=False))
    assert "Use tabs" not in prompt and "read_rules" not in prompt
    assert "- deploy: Ship a release." in prompt


def test_sections_come_in_order_rules_topics_skills(
    workspace: Path, settings: RulesSettings, write: Write, make_skill: Callable[..., Path]
) -> None:
    write(workspace / "AGENTS.md", "Use tabs. See [Testing](docs/testing.md).")
    write(workspace / "docs/testing.md", "# Testing")
    make_skill(workspace / ".steward/skills", "deploy", "Ship a release.")
    prompt = rules_prompt(workspace, settings)
    assert prompt.index("Use tabs") < prompt.index("read_rules(topic)") < prompt.index("load_skill(name)")
