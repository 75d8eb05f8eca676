"""Policy rules over the git tools: matched like any tool, and no_verify only when a rule names it."""

from __future__ import annotations

from typing import Any

from steward.safety.policy.rules import Policy
from steward.safety.types import GuardVerdict

CLEAN = GuardVerdict()


def decide(policy: Policy, tool: str, **arguments: Any) -> str:
    return policy.decide(tool, arguments, CLEAN).action


def test_git_tools_are_allowed_by_default() -> None:
    policy = Policy()
    assert decide(policy, "git_status") == "allow"
    assert decide(policy, "git_commit", message="fix", all=True) == "allow"
    assert decide(policy, "git_branch", action="create", name="topic") == "allow"


def test_plain_rules_on_git_tools_decide_as_for_any_tool() -> None:
    assert decide(Policy.from_lists(ask=["git_commit"]), "git_commit", message="fix") == "ask"
    assert decide(Policy.from_lists(deny=["git_branch"]), "git_branch", action="list") == "deny"
    narrow = Policy.from_lists(deny=['git_branch(*"action":"switch"*)'])
    assert decide(narrow, "git_branch", action="switch", name="main") == "deny"
    assert decide(narrow, "git_branch", action="create", name="topic") == "allow"


def test_no_verify_is_refused_without_a_rule_and_the_refusal_names_the_rule() -> None:
    decision = Policy().decide("git_commit", {"message": "fix", "no_verify": True}, CLEAN)
    assert decision.action == "deny"
    assert 'allow = ["git_commit(no_verify)"]' in decision.reason


def test_a_bare_allow_rule_does_not_cover_no_verify() -> None:
    policy = Policy.from_lists(allow=["git_commit"])
    assert decide(policy, "git_commit", message="fix", no_verify=True) == "deny"
    assert decide(policy, "git_commit", message="fix") == "allow"


def test_an_allow_rule_naming_no_verify_allows_it() -> None:
    policy = Policy.from_lists(allow=["git_commit(no_verify)"])
    decision = policy.decide("git_commit", {"message": "fix", "no_verify": True}, CLEAN)
    assert decision.action == "allow"
    assert decision.rule is not None and decision.rule.pattern == "no_verify"


def test_the_no_verify_rule_matches_only_calls_that_set_it() -> None:
    ask = Policy.from_lists(ask=["git_commit(no_verify)"])
    assert decide(ask, "git_commit", message="fix", no_verify=True) == "ask"
    assert decide(ask, "git_commit", message="fix", no_verify=False) == "allow"
    # A message that spells the flag out is not the flag.
    assert decide(ask, "git_commit", message='"no_verify":true', all=True) == "allow"


def test_deny_wins_over_an_allow_naming_the_flag() -> None:
    policy = Policy.from_lists(allow=["git_commit(no_verify)"], deny=["git_commit"])
    assert decide(policy, "git_commit", message="fix", no_verify=True) == "deny"


def test_autonomous_mode_does_not_turn_the_refusal_into_an_approval() -> None:
    policy = Policy.from_lists(mode="autonomous")
    assert decide(policy, "git_commit", message="fix", no_verify=True) == "deny"


def test_force_push_is_held_to_the_same_rule() -> None:
    assert decide(Policy(), "git_push", force=True) == "deny"
    assert decide(Policy.from_lists(allow=["git_push(force)"]), "git_push", force=True) == "allow"
