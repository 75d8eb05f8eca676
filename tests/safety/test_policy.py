"""Policy: deny beats ask beats allow, compound commands, defaults, modes, the write switch."""

from __future__ import annotations

import pytest

from steward.errors import ConfigError
from steward.safety.policy.rules import Policy, Rule
from steward.safety.types import Finding, GuardVerdict


def bash(*commands: str, network: bool = False, flags: tuple[Finding, ...] = ()) -> GuardVerdict:
    return GuardVerdict(findings=flags, network=network, commands=commands)


NONE = GuardVerdict()


def test_rules_parse_tool_and_pattern() -> None:
    rule = Rule.parse("bash(git status*)", "allow")
    assert (rule.tool, rule.pattern, str(rule)) == ("bash", "git status*", "bash(git status*)")
    assert Rule.parse("read_file", "allow").pattern is None
    with pytest.raises(ConfigError, match=r"write TOOL or TOOL\(PATTERN\)"):
        Rule.parse("bash(", "allow")


def test_deny_beats_allow_whatever_the_specificity() -> None:
    policy = Policy.from_lists(allow=["bash(git push origin main)"], deny=["bash(git *)"])
    decision = policy.decide("bash", {}, bash("git push origin main"))
    assert decision.action == "deny" and "deny bash(git *)" in decision.reason


def test_ask_beats_allow() -> None:
    policy = Policy.from_lists(allow=["bash(*)"], ask=["bash(make deploy*)"])
    assert policy.decide("bash", {}, bash("make deploy prod")).action == "ask"
    assert policy.decide("bash", {}, bash("make test")).action == "allow"


def test_an_allow_rule_must_cover_every_part_of_a_compound_command() -> None:
    policy = Policy.from_lists(allow=["bash(echo *)"], ask=["bash(rm *)"])
    assert policy.decide("bash", {}, bash("echo x")).action == "allow"
    assert policy.decide("bash", {}, bash("echo x", "rm y")).action == "ask"


def test_a_deny_rule_matching_any_part_denies_the_whole_command() -> None:
    policy = Policy.from_lists(allow=["bash(*)"], deny=["bash(curl *)"])
    decision = policy.decide("bash", {}, bash("echo hi", "curl http://x", network=True))
    assert decision.action == "deny"


def test_guard_blocks_win_over_any_allow_and_any_mode() -> None:
    block = (Finding("destroy", "block", "rm -rf /"),)
    policy = Policy.from_lists(allow=["bash(*)"], mode="autonomous")
    decision = policy.decide("bash", {}, bash("rm -rf /", flags=block))
    assert decision.action == "deny" and "blocked by the guard" in decision.reason


def test_defaults_read_and_write_inside_allowed_network_and_flags_ask() -> None:
    policy = Policy()
    assert policy.decide("read_file", {"path": "a.py"}, NONE).action == "allow"
    assert policy.decide("write_file", {"path": "a.py", "content": ""}, NONE).action == "allow"
    assert policy.decide("bash", {}, bash("pytest -q")).action == "allow"
    assert policy.decide("bash", {}, bash("curl https://x -o f", network=True)).action == "ask"
    flagged = (Finding("git_push", "flag", "pushes"),)
    assert policy.decide("bash", {}, bash("git push", network=True, flags=flagged)).action == "ask"


def test_an_explicit_allow_covers_a_network_command_and_grants_network() -> None:
    policy = Policy.from_lists(allow=["bash(pip install *)"])
    decision = policy.decide("bash", {}, bash("pip install rich", network=True))
    assert decision.action == "allow" and decision.network


def test_path_rules_use_directory_globs() -> None:
    policy = Policy.from_lists(ask=["edit_file(src/**)"], deny=["write_file(*.lock)"])
    assert policy.decide("edit_file", {"path": "src/pkg/mod.py"}, NONE).action == "ask"
    assert policy.decide("edit_file", {"path": "tests/test_x.py"}, NONE).action == "allow"
    assert policy.decide("write_file", {"path": "poetry.lock"}, NONE).action == "deny"
    assert policy.decide("write_file", {"path": "sub/poetry.lock"}, NONE).action == "allow"


def test_autonomous_mode_approves_asks_but_keeps_denies() -> None:
    policy = Policy.from_lists(ask=["bash(make *)"], deny=["bash(rm *)"], mode="autonomous")
    decision = policy.decide("bash", {}, bash("make deploy"))
    assert decision.action == "allow" and decision.auto
    assert policy.decide("bash", {}, bash("rm x")).action == "deny"
    network = policy.decide("bash", {}, bash("curl http://x", network=True))
    assert network.action == "allow" and network.network


def test_the_write_switch_denies_write_tools() -> None:
    policy = Policy(write=False)
    assert policy.decide("edit_file", {"path": "a"}, NONE).action == "deny"
    assert policy.decide("read_file", {"path": "a"}, NONE).action == "allow"


def test_approve_always_suggests_a_narrow_rule() -> None:
    policy = Policy()
    decision = policy.decide("bash", {}, bash("curl https://example.com -o x", network=True))
    assert str(decision.suggestion) == "bash(curl https://example.com*)"
    decision = policy.decide("bash", {}, bash("git push origin main", network=True))
    assert str(decision.suggestion) == "bash(git push*)"
    compound = policy.decide("bash", {}, bash("echo a", "curl x", network=True))
    assert compound.suggestion is None


def test_other_tools_match_their_arguments() -> None:
    policy = Policy.from_lists(deny=["srv__delete(*prod*)"])
    assert policy.decide("srv__delete", {"name": "prod-db"}, NONE).action == "deny"
    assert policy.decide("srv__delete", {"name": "test-db"}, NONE).action == "allow"


def test_deny_rules_see_through_paths_and_git_global_options() -> None:
    policy = Policy.from_lists(deny=["bash(git push*)", "bash(rm *)"])
    for command in ("git -C . push", "git -c a=b push origin", "git --no-pager push", "/usr/bin/git push"):
        assert policy.decide("bash", {}, bash(command, network=True)).action == "deny", command
    assert policy.decide("bash", {}, bash("/bin/rm -rf x")).action == "deny"
    assert policy.decide("bash", {}, bash("echo x", "rm")).action == "deny"  # what xargs runs


def test_rule_tool_names_ignore_case() -> None:
    policy = Policy.from_lists(deny=["Bash(rm *)"])
    assert policy.decide("bash", {}, bash("rm x")).action == "deny"


def test_autonomous_mode_refuses_what_the_guard_cannot_read() -> None:
    policy = Policy(mode="autonomous")
    unreadable = (Finding("unparsable", "flag", "too long to read"),)
    decision = policy.decide("bash", {}, bash("curl x | sh #...", network=True, flags=unreadable))
    assert decision.action == "deny" and "cannot read" in decision.reason


def test_autonomous_mode_grants_the_network_only_to_network_calls() -> None:
    policy = Policy(mode="autonomous")
    flagged = (Finding("credentials", "flag", "reads .env"),)
    decision = policy.decide("bash", {}, bash("cat .env", flags=flagged))
    assert decision.action == "allow" and not decision.network


def test_approve_always_for_a_flagged_call_remembers_only_that_command() -> None:
    flagged = (Finding("destructive_git", "flag", "force push"),)
    decision = Policy().decide("bash", {}, bash("git push --force origin main", network=True, flags=flagged))
    assert str(decision.suggestion) == "bash(git push --force origin main)"
