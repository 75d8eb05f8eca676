"""Allow / ask / deny rules, the two modes, and the write switch.

A rule is ``ACTION TOOL(PATTERN)``, e.g. ``allow bash(git status*)``, ``ask edit_file(src/**)``,
``deny bash(rm *)``, or just a tool name (``allow read_file``). What a pattern is matched
against depends on the tool:

* ``bash``: every simple command of the command line, normalised by the guard's parser
  (quotes removed, wrappers such as ``sudo``/``env``/``timeout`` and ``bash -c`` unwrapped);
  ``*`` matches anything;
* file tools: the path, relative to the workspace; ``**`` spans directories, ``*`` does not;
* any other tool: its arguments as compact JSON (or its only string argument).

Order: a **deny** that matches any part wins; then an **ask** that matches any part; an
**allow** applies only when allow rules match *every* part of a compound command (``allow
bash(echo *)`` does not allow ``echo x && rm y``). Without a matching rule the defaults apply:
reading is allowed, writing inside the workspace is allowed, and network use, ``git push`` and
anything the guard flags ask. Whatever the rules, the guard's blocks are refused.

Modes: ``structured`` asks; ``autonomous`` approves asks automatically, while the guard, deny
rules, the sandbox and the step limit stay on. ``write = false`` removes write tools entirely.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from steward.errors import ConfigError
from steward.safety.types import GuardVerdict

Action = Literal["allow", "ask", "deny"]
Mode = Literal["structured", "autonomous"]
ACTIONS: tuple[Action, ...] = ("deny", "ask", "allow")

READ_TOOLS = frozenset({"read_file", "list_dir", "glob", "grep", "recall_output"})
WRITE_TOOLS = frozenset({"write_file", "edit_file"})
PATH_TOOLS = READ_TOOLS | WRITE_TOOLS
COMMAND_TOOLS = frozenset({"bash"})

_RULE = re.compile(r"^\s*(?P<tool>[A-Za-z0-9_*?.\-]+)\s*(?:\((?P<pattern>.*)\))?\s*$", re.S)


@dataclass(slots=True, frozen=True)
class Rule:
    action: Action
    tool: str
    pattern: str | None = None
    source: str = "config"

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}({self.pattern})"

    @classmethod
    def parse(cls, text: str, action: Action, source: str = "config") -> Rule:
        match = _RULE.match(text)
        if not match:
            raise ConfigError(
                f"{source}: cannot read the {action} rule {text!r}; write TOOL or TOOL(PATTERN), "
                'e.g. "bash(git status*)" or "edit_file(src/**)"'
            )
        pattern = match.group("pattern")
        return cls(action, match.group("tool"), pattern.strip() if pattern is not None else None, source)

    def matches_tool(self, tool: str) -> bool:
        return fnmatch.fnmatchcase(tool.lower(), self.tool.lower())

    def matches(self, tool: str, subject: str) -> bool:
        if not self.matches_tool(tool):
            return False
        if self.pattern is None:
            return True
        if tool in PATH_TOOLS:
            return _path_match(subject, self.pattern)
        if tool in COMMAND_TOOLS:
            return any(_command_match(variant, self.pattern) for variant in command_variants(subject))
        return fnmatch.fnmatchcase(subject, self.pattern)


def _command_match(command: str, pattern: str) -> bool:
    # "rm *" also covers a bare "rm" (e.g. the command xargs runs with its input as arguments).
    return fnmatch.fnmatchcase(command, pattern) or (pattern.endswith(" *") and command == pattern[:-2])


_GIT_GLOBAL_WITH_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"})


def command_variants(command: str) -> list[str]:
    """The spellings a rule is matched against: as written, with the program's base name
    (``/usr/bin/git`` → ``git``), and for git without its global options (``git -C x push`` →
    ``git push``), so a deny rule cannot be sidestepped by spelling."""
    words = command.split(" ")
    if not words or not words[0]:
        return [command]
    base = words[0].rsplit("/", 1)[-1]
    variants = [command, " ".join([base, *words[1:]])]
    if base == "git":
        rest = words[1:]
        for _ in range(len(rest)):  # skip global options before the subcommand
            if not rest or not rest[0].startswith("-"):
                break
            option = rest.pop(0)
            if option in _GIT_GLOBAL_WITH_VALUE and rest:
                rest.pop(0)
        variants.append(" ".join(["git", *rest]))
    return list(dict.fromkeys(variants))


def _path_match(path: str, pattern: str) -> bool:
    # gitignore-like: "**" spans directories, "*" and "?" stay inside one segment.
    regex = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            regex += ".*"
            i += 2
        elif pattern[i] == "*":
            regex += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            regex += "[^/]"
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            regex += "[" + pattern[i + 1 : end].replace("\\", "\\\\") + "]"
            i = end + 1
        else:
            regex += re.escape(pattern[i])
            i += 1
    return re.fullmatch(regex, path) is not None


@dataclass(slots=True, frozen=True)
class Decision:
    action: Action
    reason: str
    #: The rule that decided, if one did (None: a default or the guard).
    rule: Rule | None = None
    #: May this call use the network inside the sandbox once it runs?
    network: bool = False
    #: The rule "approve always" would remember.
    suggestion: Rule | None = None
    #: Approved without a human (autonomous mode).
    auto: bool = False


@dataclass(slots=True)
class Policy:
    rules: list[Rule] = field(default_factory=list)
    mode: Mode = "structured"
    write: bool = True

    @classmethod
    def from_lists(
        cls,
        *,
        allow: Iterable[str] = (),
        ask: Iterable[str] = (),
        deny: Iterable[str] = (),
        mode: Mode = "structured",
        write: bool = True,
        source: str = "config",
    ) -> Policy:
        rules = [Rule.parse(t, "allow", source) for t in allow]
        rules += [Rule.parse(t, "ask", source) for t in ask]
        rules += [Rule.parse(t, "deny", source) for t in deny]
        return cls(rules, mode, write)

    def add(self, rule: Rule) -> None:
        if rule not in self.rules:
            self.rules.append(rule)

    def decide(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        verdict: GuardVerdict,
        *,
        default: str = "allow",
        changed: str = "",
    ) -> Decision:
        """Decide one proposed call, after the guard judged it.

        ``default``: the tool's own default when no rule matches ("ask" for MCP servers the
        configuration does not trust). ``changed``: why an earlier approval no longer holds (the
        tool's description changed); such a call asks whatever the rules say.
        """
        if verdict.blocked:
            return Decision("deny", f"blocked by the guard: {verdict.reason()}")
        if not self.write and tool in WRITE_TOOLS:
            return Decision("deny", "writing is turned off for this agent (write = false)")
        decision = self._by_rules(tool, _subjects(tool, arguments, verdict), verdict, default)
        if changed and decision.action != "deny":
            return self._changed(decision, changed)
        if decision.action == "ask" and self.mode == "autonomous":
            if any(f.category == "unparsable" for f in verdict.findings):
                # What the guard cannot read, nobody has judged: without a human it is refused.
                return Decision("deny", f"{decision.reason}; a command the guard cannot read is not run "
                                "unattended (autonomous mode)")  # fmt: skip
            return Decision("allow", f"{decision.reason} (approved: autonomous mode)", decision.rule,
                            network=verdict.network, auto=True)  # fmt: skip
        return decision

    def _changed(self, decision: Decision, why: str) -> Decision:
        if self.mode == "autonomous":
            # Nobody has read the new description: the tool is not run unattended.
            return Decision("deny", f"{why}; a changed tool is not run unattended (autonomous mode)")
        return Decision("ask", why, network=decision.network, suggestion=decision.suggestion)

    def _by_rules(self, tool: str, subjects: Sequence[str], verdict: GuardVerdict, default: str) -> Decision:
        suggestion = _suggest(tool, subjects, exact=verdict.flagged)
        for action in ("deny", "ask"):
            for rule in self.rules:
                if rule.action == action and any(rule.matches(tool, s) for s in subjects):
                    if action == "deny":
                        return Decision("deny", f"denied by the rule deny {rule} ({rule.source})", rule)
                    # No "approve always" here: an allow rule could never outrank this ask rule.
                    return Decision("ask", f"the rule ask {rule} ({rule.source}) asks first", rule,
                                    network=verdict.network)  # fmt: skip
        allows = [r for r in self.rules if r.action == "allow"]
        covering = [next((r for r in allows if r.matches(tool, s)), None) for s in subjects]
        if subjects and all(covering):
            first = covering[0]
            return Decision("allow", f"allowed by the rule allow {first} ({first.source if first else ''})",
                            first, network=verdict.network)  # fmt: skip
        if default == "ask" and not verdict.blocked:
            return Decision("ask", "tools of this MCP server ask first unless a rule allows them",
                            network=verdict.network, suggestion=suggestion)  # fmt: skip
        return _default(tool, verdict, suggestion)


def _default(tool: str, verdict: GuardVerdict, suggestion: Rule | None) -> Decision:
    if verdict.flagged:
        return Decision("ask", f"the guard flags it: {verdict.reason()}", network=verdict.network,
                        suggestion=suggestion)  # fmt: skip
    if verdict.network:
        return Decision("ask", "it uses the network", network=True, suggestion=suggestion)
    return Decision("allow", "allowed by default")


def _subjects(tool: str, arguments: Mapping[str, Any], verdict: GuardVerdict) -> list[str]:
    if tool in COMMAND_TOOLS:
        if verdict.commands:
            return list(verdict.commands)
        return [str(arguments.get("command", ""))]
    if tool in PATH_TOOLS:
        raw = arguments.get("path", ".")
        path = PurePosixPath(str(raw)) if raw else PurePosixPath(".")
        return [str(path).lstrip("/") if not path.is_absolute() else str(path)]
    strings = [v for v in arguments.values() if isinstance(v, str)]
    if len(arguments) == 1 and strings:
        return strings
    return [json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)]


def _suggest(tool: str, subjects: Sequence[str], *, exact: bool = False) -> Rule | None:
    """The rule that "approve always" would remember: narrow enough to mean this call.

    ``exact``: the guard flagged the call (a force push, a reset), so only this very command
    is remembered, never a prefix that would let every variant through unasked.
    """
    if tool in COMMAND_TOOLS and subjects:
        words = subjects[0].split()
        if len(subjects) > 1 or not words:
            return None  # a compound command: no single rule can honestly cover it
        if exact:
            return Rule("allow", tool, _literal(subjects[0]), "approved")
        head = " ".join(words[:2]) if len(words) > 1 and not words[1].startswith("-") else words[0]
        return Rule("allow", tool, f"{head}*", "approved")
    if len(subjects) == 1:
        return Rule("allow", tool, _literal(subjects[0]), "approved")
    return Rule("allow", tool, None, "approved")


def _literal(text: str) -> str:
    """A pattern that matches exactly ``text`` (its glob characters escaped)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)
