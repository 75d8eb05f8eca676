"""Skills: names and descriptions in the prompt, the rest loaded on request and confined."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from steward.config import RulesSettings
from steward.rules import RulesToolset, find_skills, rules_prompt, skill_warnings
from steward.tools.base import FunctionToolset, ToolContext, ToolResult, tool

Write = Callable[[Path, str], Path]
MakeSkill = Callable[..., Path]


@pytest.fixture
def skills(workspace: Path) -> Path:
    return workspace / ".steward/skills"


@pytest.fixture
def deploy(skills: Path, make_skill: MakeSkill, write: Write) -> Path:
    folder = make_skill(
        skills, "deploy", "Ship a release to production.", body="# Deploy\n\nRun `make ship`."
    )
    write(folder / "scripts/ship.sh", "#!/bin/sh\nmake ship\n")
    write(folder / "reference.md", "# Reference\n\nThe release train leaves on Tuesdays.\n")
    return folder


async def load(ctx: ToolContext, **arguments: str) -> ToolResult:
    return await RulesToolset(FunctionToolset(), settings=RulesSettings()).call_tool(
        "load_skill", arguments, ctx
    )


def test_the_prompt_lists_names_and_descriptions_only(deploy: Path, workspace: Path) -> None:
    prompt = rules_prompt(workspace, RulesSettings())
    assert prompt == (
        "Skills — load one with load_skill(name) when it fits the task:\n- deploy: Ship a release to production."
    )


def test_long_descriptions_and_many_skills_are_capped(
    skills: Path, workspace: Path, make_skill: MakeSkill
) -> None:
    for n in range(60):
        make_skill(skills, f"skill-{n:02d}", "word " * 200)
    prompt = rules_prompt(workspace, RulesSettings())
    lines = prompt.splitlines()
    assert len(lines) == 1 + 50 + 1
    assert all(len(line) < 300 for line in lines)
    assert lines[-1] == "- … and 10 more (load_skill lists them all)"


async def test_load_skill_gives_the_body_without_front_matter_and_lists_the_files(
    deploy: Path, ctx: ToolContext
) -> None:
    result = await load(ctx, name="deploy")
    assert not result.is_error
    assert result.content == (
        "# Skill: deploy\n\n# Deploy\n\nRun `make ship`.\n\n"
        "Files in this skill — load one with load_skill(name='deploy', file=PATH):\n"
        "- reference.md\n- scripts/ship.sh"
    )


async def test_load_skill_loads_a_file_of_the_skill(deploy: Path, ctx: ToolContext) -> None:
    result = await load(ctx, name="deploy", file="scripts/ship.sh")
    assert (result.is_error, result.content) == (False, "#!/bin/sh\nmake ship\n")


@pytest.mark.parametrize(
    ("file", "message"),
    [
        ("../../../AGENTS.md", "goes up out of the skill folder with '..'"),
        ("/etc/passwd", "is an absolute path"),
        ("~/.ssh/id_rsa", "is an absolute path"),
        ("missing.md", "Skill 'deploy' has no file 'missing.md'. Its files: reference.md, scripts/ship.sh."),
        ("scripts", "is a folder"),
    ],
)
async def test_files_outside_the_skill_or_missing_are_refused(
    deploy: Path, ctx: ToolContext, file: str, message: str
) -> None:
    result = await load(ctx, name="deploy", file=file)
    assert result.is_error and message in result.content


async def test_a_symlink_out_of_the_skill_folder_is_refused(
    deploy: Path, ctx: ToolContext, tmp_path: Path, write: Write
) -> None:
    (deploy / "secret.txt").symlink_to(write(tmp_path / "outside/secret.txt", "TOP SECRET"))
    result = await load(ctx, name="deploy", file="secret.txt")
    assert result.is_error and "symlink leading out of the skill folder" in result.content
    listing = (await load(ctx, name="deploy")).content
    assert "secret.txt" not in listing


async def test_a_binary_skill_file_is_refused(deploy: Path, ctx: ToolContext) -> None:
    (deploy / "logo.png").write_bytes(b"\x89PNG\x00\x00data")
    result = await load(ctx, name="deploy", file="logo.png")
    assert result.is_error and "not a readable text file" in result.content


async def test_a_large_skill_file_is_capped(deploy: Path, workspace: Path, write: Write) -> None:
    write(deploy / "big.txt", "x" * 5000)
    ctx = ToolContext(workspace=workspace)
    ctx.settings.read_cap_chars = 1000
    result = await load(ctx, name="deploy", file="big.txt")
    assert result.content == "x" * 1000 + "\n[cut at 1000 characters; the rest of big.txt is not shown]"


async def test_an_unknown_skill_lists_the_known_ones(deploy: Path, ctx: ToolContext) -> None:
    result = await load(ctx, name="deplo")
    assert result.is_error
    assert result.content == "No skill named 'deplo'. Known skills: deploy. Call load_skill with one of them."


def test_broken_skills_are_skipped_with_a_warning_naming_the_fix(
    skills: Path, workspace: Path, make_skill: MakeSkill, write: Write
) -> None:
    make_skill(skills, "good", "Works.")
    write(skills / "no-front/SKILL.md", "Just a body.\n")
    write(skills / "unclosed/SKILL.md", "---\nname: unclosed\n")
    write(skills / "bad-yaml/SKILL.md", "---\nname: [oops\n---\nbody\n")
    write(skills / "no-description/SKILL.md", "---\nname: nodesc\n---\nbody\n")
    write(skills / "list/SKILL.md", "---\n- a\n- b\n---\n")
    write(skills / "bad-name/SKILL.md", "---\nname: has spaces\ndescription: d\n---\n")
    (skills / "binary").mkdir()
    (skills / "binary/SKILL.md").write_bytes(b"---\x00\x01")
    (skills / "not-a-skill").mkdir()  # a folder without SKILL.md is quietly not a skill
    assert [s.name for s in find_skills(workspace, RulesSettings()).skills] == ["good"]
    assert skill_warnings(workspace, RulesSettings()) == [
        ".steward/skills/bad-name/SKILL.md: skipped: the name 'has spaces' is not usable; use letters, digits, "
        "'-', '_' or '.' (at most 64), e.g. 'name: bad-name'",
        ".steward/skills/bad-yaml/SKILL.md: skipped: the front matter is not valid YAML "
        + skill_warnings(workspace, RulesSettings())[1].split("YAML ", 1)[1],
        ".steward/skills/binary/SKILL.md: skipped: it is not a readable text file inside the skill folder; "
        "replace it",
        ".steward/skills/list/SKILL.md: skipped: the front matter is not a mapping; write it as 'name: ...' and "
        "'description: ...'",
        ".steward/skills/no-description/SKILL.md: skipped: the front matter has no 'description'; add "
        "'description: <when to use this skill>'",
        ".steward/skills/no-front/SKILL.md: skipped: it does not start with front matter; begin the file with "
        "a line '---'",
        ".steward/skills/unclosed/SKILL.md: skipped: the front matter is never closed; end it with a line '---'",
    ]
    assert skill_warnings(workspace, RulesSettings())[1].endswith("; fix its syntax")


def test_the_first_directory_wins_a_name_project_before_user(
    skills: Path, workspace: Path, home: Path, make_skill: MakeSkill
) -> None:
    make_skill(skills, "deploy", "Project deploy.")
    make_skill(home / ".config/steward/skills", "deploy", "User deploy.")
    make_skill(home / ".config/steward/skills", "notes", "User notes.")
    scan = find_skills(workspace, RulesSettings())
    assert [(s.name, s.description) for s in scan.skills] == [
        ("deploy", "Project deploy."),
        ("notes", "User notes."),
    ]
    assert scan.warnings == (
        "~/.config/steward/skills/deploy/SKILL.md: skipped: the skill 'deploy' is already defined in "
        ".steward/skills/deploy/SKILL.md; rename one of them",
    )


def test_a_skill_folder_symlinked_outside_is_ignored(
    skills: Path, workspace: Path, tmp_path: Path, make_skill: MakeSkill
) -> None:
    outside = make_skill(tmp_path / "outside", "evil", "Reads your keys.")
    skills.mkdir(parents=True)
    (skills / "evil").symlink_to(outside)
    scan = find_skills(workspace, RulesSettings())
    assert scan.skills == ()
    assert "a symlink to a folder outside skills; ignored" in scan.warnings[0]


def test_a_project_skill_dir_symlinked_outside_the_workspace_is_ignored(
    workspace: Path, tmp_path: Path, make_skill: MakeSkill
) -> None:
    make_skill(tmp_path / "outside", "evil", "Reads your keys.")
    (workspace / ".steward").mkdir()
    (workspace / ".steward/skills").symlink_to(tmp_path / "outside")
    scan = find_skills(workspace, RulesSettings())
    assert scan.skills == ()
    assert scan.warnings == (".steward/skills: it leads outside the workspace, so its skills are ignored",)


def test_scans_are_cached_until_a_skill_changes(
    skills: Path, workspace: Path, make_skill: MakeSkill, write: Write
) -> None:
    make_skill(skills, "one", "First.")
    settings = RulesSettings()
    first = find_skills(workspace, settings)
    assert find_skills(workspace, settings) is first
    make_skill(skills, "two", "Second.")  # a new folder changes the skills directory
    assert [s.name for s in find_skills(workspace, settings).skills] == ["one", "two"]
    write(skills / "one/SKILL.md", "---\nname: one\ndescription: First, edited at length.\n---\n")
    assert find_skills(workspace, settings).skills[0].description == "First, edited at length."


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


async def test_load_skill_is_offered_only_with_skills_and_the_list_is_reused(
    workspace: Path, ctx: ToolContext, make_skill: MakeSkill, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steward.rules._toolset as rules_toolset

    toolset = RulesToolset(FunctionToolset([ping]), settings=RulesSettings())
    assert [s.name for s in await toolset.get_tools(ctx)] == ["ping"]
    make_skill(workspace / ".agents/skills", "deploy", "Ship it.")
    # Within the recheck interval the answer is kept (the loop lists tools every step)...
    assert [s.name for s in await toolset.get_tools(ctx)] == ["ping"]
    monkeypatch.setattr(rules_toolset, "OFFER_RECHECK_S", 0.0)  # ...and then the folders are looked at again
    tools = await toolset.get_tools(ctx)
    assert [s.name for s in tools] == ["ping", "load_skill", "find_skill"]
    assert await toolset.get_tools(ctx) is tools
