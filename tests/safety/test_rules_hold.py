"""Rules about programs hold: however a program is reached, a deny or ask rule on it applies.

Whole-program deny rules are masked by the sandbox (what to mask: ``plan_masks``); every other
rule fails closed on commands the guard cannot fully read (asked in structured mode, refused in
autonomous mode); plumbing is judged as its porcelain command; secret files are not shown.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from steward.safety.policy.guard import Guard
from steward.safety.policy.programs import MAX_NAMES, plan_masks
from steward.safety.policy.rules import Decision, Mode, Policy, Rule, could_apply, whole_program
from steward.safety.policy.shell_parse import SimpleCommand, parse_shell
from steward.safety.types import GuardVerdict

WORKSPACE = Path("/srv/project")
HOME = Path("/home/u")
PUSH: dict[str, Any] = {"deny": ["bash(git push*)"]}


def decide(
    command: str, *, mode: Mode = "structured", masked: frozenset[str] = frozenset(), **rules: Any
) -> Decision:
    policy = Policy.from_lists(mode=mode, **rules)
    policy.masked = masked
    verdict = Guard().check_command(command, workspace=WORKSPACE, home=HOME)
    return policy.decide("bash", {"command": command}, verdict)


def verdict(command: str) -> GuardVerdict:
    return Guard().check_command(command, workspace=WORKSPACE, home=HOME)


def inner(command: str, argv0: str) -> SimpleCommand:
    found = [c for c in parse_shell(command).commands if c.argv[:1] == (argv0,) and c.origin != "top"]
    assert found, parse_shell(command)
    return found[-1]


# --- which deny rules forbid a whole program ------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "program"),
    [
        ("bash(rm *)", "rm"),
        ("bash(rm*)", "rm"),
        ("bash(/usr/bin/rm *)", "/usr/bin/rm"),
        ("*(rm *)", "rm"),
        ("bash(rm)", None),
        ("bash(rm -r*)", None),
        ("bash(git push*)", None),
        ("bash(r? *)", None),
        ("bash(*)", None),
        ("bash", None),
        ("read_file(rm *)", None),
    ],
)
def test_whole_program_rules_are_a_plain_name_then_a_star(rule: str, program: str | None) -> None:
    assert whole_program(Rule.parse(rule, "deny")) == program


def test_ask_and_allow_rules_never_mask_a_program() -> None:
    assert whole_program(Rule.parse("bash(rm *)", "ask")) is None
    assert whole_program(Rule.parse("bash(rm *)", "allow")) is None


@pytest.mark.parametrize(
    ("pattern", "known", "could"),
    [
        ("git push*", "git", True),
        ("git push*", "git push", True),
        ("git push origin*", "git push", True),
        ("git push", "git push", True),
        ("git push*", "git pull", False),
        ("git push*", "echo", False),
        ("git push*", "gitk", False),
        ("*push*", "git", True),
        ("git [pq]ush*", "git", True),
        ("g?t push*", "git", True),
        ("git push*", "", True),
        ("rm *", "rm -f", True),
        ("git push*", "/usr/bin/git", True),
        ("git push*", "git -C sub", True),
    ],
)
def test_could_apply_asks_whether_some_continuation_matches(pattern: str, known: str, could: bool) -> None:
    assert could_apply(Rule("deny", "bash", pattern), known) is could


# --- the parser unwraps or marks what runs in turn -----------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "builtin eval git push",
        "command git push",
        "exec git push",
        "nohup git push",
        "nice -n 5 git push",
        "stdbuf -oL git push",
        "setsid git push",
        "chroot / git push",
        "coproc git push",
        "flock /tmp/lock git push",
        "flock /tmp/lock -c 'git push'",
        "script -qc 'git push' /dev/null",
        "taskset 0x1 git push",
        "unshare -r git push",
        "systemd-run --user git push",
        "trap 'git push' EXIT",
        "trap -- 'git push' INT TERM",
        "parallel ::: 'git push'",
        "find . -maxdepth 0 -exec git push \\;",
    ],
)
def test_wrappers_and_later_bodies_are_unwrapped(command: str) -> None:
    assert ("git", "push") in [c.argv for c in parse_shell(command).commands]


@pytest.mark.parametrize("command", ["trap - INT", "trap -p", "trap -l", "trap INT", "trap '' INT"])
def test_trap_listings_and_resets_run_nothing(command: str) -> None:
    assert len(parse_shell(command).commands) == 1


@pytest.mark.parametrize(
    ("command", "argv0", "known_words"),
    [
        ("alias g=git", "git", 1),
        ("hash -p /usr/bin/git g", "/usr/bin/git", 1),
        ("echo push | xargs git", "git", 1),
        ("xargs -0 -n1 rm < list", "rm", 1),
        ("xargs -I{} git {} origin < subs", "git", 1),
        ("xargs -i git {} < subs", "git", 1),
        ("find . -name x -exec git {} \\;", "git", 1),
        ("parallel git ::: push", "git", 1),
    ],
)
def test_words_supplied_at_run_time_are_marked(command: str, argv0: str, known_words: int) -> None:
    assert inner(command, argv0).open_from == known_words


@pytest.mark.parametrize(
    "command",
    [
        "xargs -I{} {} push < programs",
        "find . -exec {} \\;",
        "cat lines | parallel",
        "bash <(echo git push)",
        "source <(echo git push)",
        'eval "$X"',
        'bash -c "$S"',
        'trap "$X" EXIT',
    ],
)
def test_a_program_known_only_at_run_time_is_marked(command: str) -> None:
    assert any(c.open_from == 0 for c in parse_shell(command).commands), parse_shell(command)


@pytest.mark.parametrize(
    ("command", "open_from"),
    [
        ("git $SUB", 1),
        ("git $(echo push)", 1),
        ("git pus?", 1),
        ("git p{u,}sh", 1),
        ("git commit -m $MSG", 3),
        ("git 'p*'", None),
        ('git "$ARG"x push', 1),
        ("git push", None),
        ('"$VENV/bin/python" -m pytest', None),
    ],
)
def test_expansions_globs_and_braces_end_what_is_known(command: str, open_from: int | None) -> None:
    assert parse_shell(command).commands[0].open_from == open_from


# --- fail closed: what the guard cannot read ----------------------------------------------

UNREADABLE_GIT = [
    "git $SUB origin",
    "git $(cat verb) origin",
    "git `cat verb`",
    "git pus? origin",
    "git p{u,}sh",
    "echo push | xargs git",
    "xargs -I{} git {} < verbs",
    "find . -name verb -exec git {} \\;",
    "parallel git ::: push",
    "alias g=git; g push",
    "hash -p /usr/bin/git g; g push",
    'f() { git "$@"; }; f push',
    "sh -c 'git \"$0\"' push",
    "git -c alias.p=push p",
    "git --config-env=alias.p=VERB p",
    "git config alias.p push",
    "git config --global alias.p push",
    "git config --edit",
    "git -c include.path=/tmp/x status",
    "git p origin main",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.p GIT_CONFIG_VALUE_0=push git p",
    "git send-pack origin main",
    "python3 -c \"import subprocess, sys; subprocess.run(['git', sys.argv[1]])\" push",
]


@pytest.mark.parametrize("command", UNREADABLE_GIT)
def test_a_git_command_the_guard_cannot_read_is_asked_about(command: str) -> None:
    decision = decide(command, deny=["bash(git push --force*)"])
    assert decision.action == "ask", decision
    assert decision.unsure
    assert decision.suggestion is None  # no "approve always" for what nobody could read
    assert "cannot tell whether the rule deny bash(git push --force*)" in decision.reason


@pytest.mark.parametrize("command", UNREADABLE_GIT)
def test_a_git_command_the_guard_cannot_read_is_refused_unattended(command: str) -> None:
    decision = decide(command, mode="autonomous", deny=["bash(git push --force*)"])
    assert decision.action == "deny", decision
    assert "not run unattended" in decision.reason


@pytest.mark.parametrize("command", UNREADABLE_GIT)
def test_an_ask_rule_fails_closed_like_a_deny_rule(command: str) -> None:
    assert decide(command, ask=["bash(git push --force*)"]).unsure
    assert decide(command, mode="autonomous", ask=["bash(git push --force*)"]).action == "deny"


def test_the_reason_says_what_could_not_be_known() -> None:
    reason = decide("git $SUB origin", **PUSH).reason
    assert "'$SUB' is expanded at run time" in reason
    assert "a human decides" in reason
    assert "xargs appends the words it reads" in decide("echo push | xargs git", **PUSH).reason
    assert "git p is not a git command" in decide("git p", **PUSH).reason
    assert "it sets alias.p" in decide("git config alias.p push", **PUSH).reason


@pytest.mark.parametrize(
    "command",
    [
        'eval "$X"',
        'bash -c "$S"',
        "bash <(cat script)",
        "source <(cat script)",
        "cat lines | parallel",
        "xargs -I{} {} < programs",
        'trap "$X" EXIT',
        'python3 -c "import os, sys; os.system(sys.argv[1])" x',
        "node -e 'require(\"child_process\").execSync(process.argv[1])'",
        "ruby -e 'system \"make #{ARGV[0]}\"'",
    ],
)
def test_an_unknown_program_could_match_any_rule(command: str) -> None:
    for rules in ({"deny": ["bash(make deploy*)"]}, {"ask": ["bash(make deploy*)"]}, PUSH):
        assert decide(command, **rules).unsure, (command, rules)
        assert decide(command, mode="autonomous", **rules).action == "deny", (command, rules)


@pytest.mark.parametrize(
    "command",
    [
        "git $SUB",
        "echo $HOME",
        "ls *.py",
        "rm -rf build/$X",
        'git commit -m "$(cat msg)"',
        "git log --oneline | xargs echo",
        "find . -name '*.pyc' -exec rm {} +",
        "git send-pack origin main",
        'python3 -c "import asyncio; print(1)"',
    ],
)
def test_rules_that_cannot_match_leave_unreadable_commands_alone(command: str) -> None:
    # Nothing that starts as these commands do could be ``make deploy …``.
    decision = decide(command, mode="autonomous", deny=["bash(make deploy*)"])
    assert not decision.unsure
    assert decision.action == "allow", decision


def test_a_rule_that_matches_as_written_does_not_fail_closed() -> None:
    # ``git push $REMOTE`` is a push whatever $REMOTE holds: the ask rule asks, and autonomous mode
    # approves it as it approves any ask.
    decision = decide("git push $REMOTE", mode="autonomous", ask=["bash(git push*)"])
    assert decision.action == "allow" and decision.auto
    assert decide("git push $REMOTE", **PUSH).action == "deny"


def test_an_allow_rule_does_not_outrank_an_unreadable_command() -> None:
    decision = decide("git $SUB", allow=["bash(*)"], **PUSH)
    assert decision.action == "ask" and decision.unsure


def test_a_masked_program_needs_no_fail_closed() -> None:
    # Nothing can run rm inside the sandbox, so an unknown program cannot reach it either.
    assert decide('eval "$X"', mode="autonomous", deny=["bash(rm *)"]).action == "deny"
    masked = decide('eval "$X"', mode="autonomous", masked=frozenset({"rm"}), deny=["bash(rm *)"])
    assert masked.action == "allow" and masked.auto
    # A subcommand rule cannot be masked: it still fails closed.
    assert decide('eval "$X"', mode="autonomous", masked=frozenset({"rm"}), **PUSH).action == "deny"


# --- what the guard can read is matched --------------------------------------------------------

DENIED_AS_WRITTEN = [
    "alias p='git push'",
    "alias p='git push'; p",
    "trap 'git push origin main' EXIT",
    "builtin command git push",
    "coproc git push",
    "flock /tmp/l -c 'git push'",
    "script -qc 'git push' /dev/null",
    "parallel ::: 'git push'",
    "python3 -c \"import os; os.system('git push')\"",
    "python3 -c \"import subprocess; subprocess.run(['git', 'push'])\"",
    "perl -e 'system \"git push\"'",
    "ruby -e 'system(\"git push\")'",
    "find . -maxdepth 0 -exec git push \\;",
    "hash -p /usr/bin/git g; g push",
]


@pytest.mark.parametrize("command", DENIED_AS_WRITTEN)
def test_commands_run_in_turn_are_matched_by_the_rules(command: str) -> None:
    assert decide(command, **PUSH).action in ("deny", "ask")
    assert decide(command, mode="autonomous", **PUSH).action == "deny"


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("git send-pack origin main", "bash(git push*)"),
        ("git http-push https://h/r main", "bash(git push*)"),
        ("git -C sub send-pack origin main", "bash(git push*)"),
        ("git update-ref -d refs/heads/topic", "bash(git branch -D*)"),
        ("git update-ref -d refs/tags/v1", "bash(git tag -d*)"),
        ("git read-tree -u --reset HEAD", "bash(git reset --hard*)"),
        ("git checkout-index -f -a", "bash(git checkout*)"),
        ("git commit-tree HEAD^{tree} -m x", "bash(git commit*)"),
        ("git update-ref refs/heads/main abc123", "bash(git commit*)"),
        ("git update-index --force-remove src/x.py", "bash(git rm*)"),
        ("git prune", "bash(git gc*)"),
    ],
)
def test_plumbing_matches_the_rules_of_its_porcelain(command: str, rule: str) -> None:
    decision = decide(command, deny=[rule])
    assert decision.action == "deny", decision
    assert rule in decision.reason


def test_plumbing_with_options_the_rule_cannot_read_fails_closed() -> None:
    # ``send-pack``'s options are not push's: a rule on some pushes could apply to any send-pack.
    decision = decide("git send-pack origin main", deny=["bash(git push origin +*)"])
    assert decision.action == "ask" and decision.unsure
    assert "git send-pack does what git push does" in decision.reason


def test_plumbing_is_flagged_like_its_porcelain() -> None:
    assert {f.category for f in verdict("git read-tree -u --reset HEAD").findings} == {"destructive_git"}
    assert {f.category for f in verdict("git send-pack origin main").findings} == {"git_push"}
    assert verdict("git send-pack origin main").network
    assert verdict("git read-tree HEAD").findings == ()


def test_an_allow_rule_for_plumbing_need_not_cover_its_porcelain() -> None:
    decision = decide("git read-tree HEAD", allow=["bash(git read-tree*)"])
    assert decision.action == "allow"


def test_git_commands_and_their_options_are_not_mistaken_for_aliases() -> None:
    for command in (
        "git status",
        "git -C sub log --oneline",
        "git --no-pager diff",
        "git config user.name me",
    ):
        assert verdict(command).opaque == (), command


def test_the_guard_keeps_blocking_a_computed_command_name() -> None:
    v = verdict("$CMD push")
    assert v.blocked and "obfuscation" in v.reason()
    assert decide("$CMD push", allow=["bash(*)"]).action == "deny"


def test_alias_bodies_do_not_move_the_working_directory() -> None:
    assert verdict("alias up='cd ..'; rm -rf build").findings == ()


# --- secret files --------------------------------------------------------------------------


def file_decision(tool: str, path: str, policy: Policy | None = None) -> Decision:
    chosen = policy if policy is not None else Policy()
    return chosen.decide(tool, {"path": path}, GuardVerdict())


@pytest.mark.parametrize(
    "path", [".env", "sub/.env", ".env.production", "deploy/id_ed25519", "certs/site.key"]
)
def test_reading_a_secret_file_is_refused_with_the_fix(path: str) -> None:
    decision = file_decision("read_file", path)
    assert decision.action == "deny"
    assert f'allow = ["read_file({path})"]' in decision.reason


def test_grep_of_a_secret_file_is_refused_but_names_stay_visible() -> None:
    assert file_decision("grep", ".env").action == "deny"
    assert file_decision("grep", ".").action == "allow"
    assert file_decision("list_dir", ".").action == "allow"
    assert file_decision("glob", ".env").action == "allow"


@pytest.mark.parametrize("path", [".env.example", "README.md", "keys/id_ed25519.pub", "src/env.py"])
def test_files_that_are_not_secret_read_as_before(path: str) -> None:
    assert file_decision("read_file", path).action == "allow"


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
def test_writing_a_secret_file_asks(tool: str) -> None:
    decision = file_decision(tool, "config/.env")
    assert decision.action == "ask"
    assert f'allow = ["{tool}(config/.env)"]' in decision.reason
    assert str(decision.suggestion) == f"{tool}(config/.env)"


@pytest.mark.parametrize("rule", ["read_file(.env)", "read_file(**/.env)", "read_file(*.env*)", "*(.env)"])
def test_an_allow_rule_naming_the_secret_file_wins(rule: str) -> None:
    assert file_decision("read_file", ".env", Policy.from_lists(allow=[rule])).action == "allow"


@pytest.mark.parametrize("rule", ["read_file", "read_file(**)", "read_file(*)", "*"])
def test_a_blanket_allow_rule_does_not_hand_out_secrets(rule: str) -> None:
    policy = Policy.from_lists(allow=[rule])
    assert file_decision("read_file", ".env", policy).action == "deny"
    assert file_decision("read_file", "src/app.py", policy).action == "allow"


def test_deny_and_ask_rules_decide_secret_files_as_usual() -> None:
    assert file_decision("read_file", ".env", Policy.from_lists(ask=["read_file(.env)"])).action == "ask"
    policy = Policy.from_lists(allow=["write_file(.env)"], deny=["write_file(.env)"])
    assert file_decision("write_file", ".env", policy).action == "deny"
    assert (
        file_decision("write_file", ".env", Policy.from_lists(allow=["write_file(.env)"])).action == "allow"
    )


def test_secret_file_patterns_come_from_the_policy() -> None:
    policy = Policy.from_lists(secret_files=["*.secret"])
    assert file_decision("read_file", "db.secret", policy).action == "deny"
    assert file_decision("read_file", ".env", policy).action == "allow"


def test_secret_files_in_autonomous_mode() -> None:
    # Reading stays refused; writing asks, which autonomous mode approves like any other ask.
    policy = Policy(mode="autonomous")
    assert file_decision("read_file", ".env", policy).action == "deny"
    decision = file_decision("write_file", ".env", policy)
    assert decision.action == "allow" and decision.auto


# --- what the sandbox masks ----------------------------------------------------------------


def deny(*rules: str) -> Policy:
    return Policy.from_lists(deny=list(rules))


def executable(path: Path, content: bytes = b"#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(0o755)
    return path


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, Any]:
    """A fake machine: a binary directory, a library directory and a PATH of both kinds."""
    return {
        "bin": tmp_path / "bin",
        "lib": tmp_path / "lib",
        "opt": tmp_path / "opt",
        "kw": {"binary_dirs": (str(tmp_path / "bin"),), "library_dirs": (str(tmp_path / "lib"),)},
        "path": f"{tmp_path / 'opt'}{os.pathsep}{tmp_path / 'bin'}",
    }


def test_rm_on_this_machine_is_masked_at_its_real_file() -> None:
    found = shutil.which("rm")
    if found is None:
        pytest.skip("no rm on PATH")
    plan = plan_masks(deny("bash(rm *)"), os.environ.get("PATH", ""))
    (program,) = plan.programs
    real = str(Path(found).resolve())
    assert program.program == "rm" and real in program.files
    assert found in program.names
    assert all(not Path(f).is_symlink() for f in plan.files)
    assert plan.masked == frozenset({"rm"})


def test_a_subcommand_or_ask_rule_masks_nothing() -> None:
    policy = Policy.from_lists(ask=["bash(rm *)"], deny=["bash(git push*)", "bash(rm -rf*)"])
    plan = plan_masks(policy, os.environ.get("PATH", ""))
    assert plan.programs == () and plan.unmasked == ()


def test_symlinks_hard_links_and_copies_are_covered(machine: dict[str, Any]) -> None:
    tool = executable(machine["bin"] / "tool", b"tool v1")
    (machine["bin"] / "tool-alias").symlink_to("tool")
    os.link(tool, machine["bin"] / "tool1.2")  # a versioned hard link
    executable(machine["lib"] / "tool-core" / "tool", b"tool v1")  # a copy in its own directory
    executable(machine["bin"] / "other", b"tool v2")  # same size, other bytes
    other_path = executable(machine["opt"] / "tool", b"another tool")  # first on PATH
    plan = plan_masks(deny("bash(tool *)"), machine["path"], **machine["kw"])
    (program,) = plan.programs
    assert set(program.files) == {
        str(tool.resolve()),
        str((machine["bin"] / "tool1.2").resolve()),
        str((machine["lib"] / "tool-core" / "tool").resolve()),
        str(other_path.resolve()),
    }
    assert str(machine["bin"] / "tool-alias") in program.names
    assert str(machine["bin"] / "other") not in program.names
    assert plan.warnings == ()


def test_a_symlink_in_path_is_masked_at_its_target(machine: dict[str, Any]) -> None:
    real = executable(machine["bin"] / "python3.11")
    machine["opt"].mkdir()
    (machine["opt"] / "python3").symlink_to(real)
    plan = plan_masks(deny("bash(python3 *)"), machine["path"], **machine["kw"])
    assert plan.files == (str(real.resolve()),)
    assert str(machine["opt"] / "python3") in plan.programs[0].names


def test_a_program_whose_file_has_another_name_is_multi_call(machine: dict[str, Any]) -> None:
    executable(machine["bin"] / "busybox")
    for name in ("rm", "ls", "cat"):
        (machine["bin"] / name).symlink_to("busybox")
    plan = plan_masks(deny("bash(rm *)"), machine["path"], **machine["kw"])
    assert plan.programs == () and plan.unmasked == ("rm",)
    assert "multi-call" in plan.warnings[0] and "enforced by the guard and the policy" in plan.warnings[0]
    # Left to the policy, the rule fails closed on commands the guard cannot read.
    policy = deny("bash(rm *)")
    policy.masked = plan.masked
    assert policy.decide("bash", {}, verdict('eval "$X"')).unsure


def test_denying_the_multi_call_binary_by_its_own_name_masks_its_few_names(machine: dict[str, Any]) -> None:
    executable(machine["bin"] / "xz")
    for name in ("unxz", "xzcat"):
        (machine["bin"] / name).symlink_to("xz")
    plan = plan_masks(deny("bash(xz *)"), machine["path"], **machine["kw"])
    assert plan.files == (str((machine["bin"] / "xz").resolve()),)
    assert {Path(n).name for n in plan.programs[0].names} == {"xz", "unxz", "xzcat"}


def test_a_file_with_very_many_names_is_multi_call(machine: dict[str, Any]) -> None:
    executable(machine["bin"] / "busybox")
    for i in range(MAX_NAMES + 1):
        (machine["bin"] / f"applet{i}").symlink_to("busybox")
    plan = plan_masks(deny("bash(busybox *)"), machine["path"], **machine["kw"])
    assert plan.unmasked == ("busybox",)
    assert "answers to" in plan.warnings[0]


def test_hard_links_under_other_names_are_multi_call(machine: dict[str, Any]) -> None:
    bzip2 = executable(machine["bin"] / "bzip2")
    os.link(bzip2, machine["bin"] / "bunzip2")
    plan = plan_masks(deny("bash(bunzip2 *)"), machine["path"], **machine["kw"])
    assert plan.unmasked == ("bunzip2",)
    assert "bzip2" in plan.warnings[0]


def test_hard_links_outside_the_search_are_reported(machine: dict[str, Any], tmp_path: Path) -> None:
    tool = executable(machine["bin"] / "tool")
    os.link(tool, tmp_path / "elsewhere")
    plan = plan_masks(deny("bash(tool *)"), machine["path"], **machine["kw"])
    assert plan.masked == frozenset({"tool"})
    assert any("1 more hard link" in w for w in plan.warnings)


def test_programs_the_sandbox_runs_are_never_masked(machine: dict[str, Any]) -> None:
    executable(machine["bin"] / "dash")
    (machine["bin"] / "sh").symlink_to("dash")
    executable(machine["bin"] / "env")
    plan = plan_masks(deny("bash(sh *)", "bash(dash*)", "bash(env *)"), machine["path"], **machine["kw"])
    assert plan.programs == ()
    assert plan.unmasked == ("sh", "dash", "env")
    assert all("enforced by the guard and the policy only" in w for w in plan.warnings)
    assert "same file as a program the sandbox runs" in plan.warnings[1]


def test_what_cannot_be_masked_is_explained(machine: dict[str, Any]) -> None:
    plan = plan_masks(
        deny("bash(nosuch *)", "bash(mv)"), f"bin{os.pathsep}{machine['path']}", **machine["kw"]
    )
    assert plan.unmasked == ("nosuch",)
    text = "\n".join(plan.warnings)
    assert "nosuch is not on PATH" in text
    assert "forbids only mv without arguments; to forbid the program, write bash(mv *)" in text
    assert "relative entries (bin)" in text


def test_a_rule_naming_a_path_masks_that_file(machine: dict[str, Any]) -> None:
    tool = executable(machine["bin"] / "tool")
    plan = plan_masks(deny(f"bash({tool} *)"), "", **machine["kw"])
    assert plan.files == (str(tool.resolve()),)
    assert plan.masked == frozenset({str(tool)})
