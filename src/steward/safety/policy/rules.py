"""Allow / ask / deny rules, the two modes, and the write switch.

A rule is ``ACTION TOOL(PATTERN)``, e.g. ``allow bash(git status*)``, ``ask edit_file(src/**)``,
``deny bash(rm *)``, or just a tool name (``allow read_file``). What a pattern is matched
against depends on the tool:

* ``bash``: every simple command of the command line, normalised by the guard's parser
  (quotes removed, wrappers such as ``sudo``/``env``/``timeout`` and ``bash -c`` unwrapped);
  ``*`` matches anything;
* file tools: the path, relative to the workspace; ``**`` spans directories, ``*`` does not;
* any other tool: its arguments as compact JSON (or its only string argument);
* a flag of a typed tool (:data:`FLAGS`: ``git_commit(no_verify)``, ``git_push(force)``): the
  calls that set it true. Such a call runs only when an allow rule names the flag.

Order: a **deny** that matches any part wins; then an **ask** that matches any part; an
**allow** applies only when allow rules match *every* part of a compound command (``allow
bash(echo *)`` does not allow ``echo x && rm y``). Without a matching rule the defaults apply:
reading is allowed, writing inside the workspace is allowed, and network use, ``git push`` and
anything the guard flags ask. Whatever the rules, the guard's blocks are refused.

Rules about programs hold however the program is reached:

* **Whole programs.** A deny rule on ``bash`` whose pattern is a plain program name and then
  ``*``, with or without a space (``bash(rm *)``, ``bash(rm*)``, ``bash(/usr/bin/rm *)``),
  forbids the program with any arguments (:func:`whole_program`); the sandbox masks its file
  (:mod:`steward.safety.policy.programs`), so an alias, a copy, a script or another program cannot
  run it either. ``bash(rm)`` forbids only ``rm`` without arguments and masks nothing; ``rm*``
  also denies ``rmdir`` when written out, but only ``rm`` itself is masked.
* **Everything else fails closed.** Subcommand and argument rules (``bash(git push*)``), ask
  rules, and whole-program rules whose program is not in :attr:`Policy.masked` cannot be
  enforced by the sandbox. For them, a command the guard cannot fully read
  (:attr:`GuardVerdict.opaque`: a program or subcommand computed at run time, ``xargs`` input,
  an alias body, a git alias or an unknown git subcommand, plumbing such as ``git send-pack``)
  counts as matching every deny or ask rule that a command starting with what *is* known could
  match (a rule the command matches as written decides as usual). It is asked about without
  an "approve always" suggestion in structured mode, and refused in autonomous mode. Plumbing
  is also matched in its porcelain spelling (:attr:`GuardVerdict.equivalents`), so ``deny
  bash(git push*)`` denies ``git send-pack``.
* **What no rule sees.** A program file that was there before the command (``./deploy.sh``,
  ``python tool.py``, ``make``) does whatever its file says; the guard does not read files. A
  script the same command line writes and then runs (``echo 'git push' > s.sh; sh s.sh``), and a
  shell reading what another program pipes into it (``cat <<EOF | sh``, ``python gen.py | bash``)
  count as computed, like the words above. Whole-program rules
  still hold there (the program is masked), and network use stays off in the sandbox unless
  allowed; a subcommand rule such as ``bash(git branch -D*)`` does not reach inside the file.

Secret files (:mod:`steward.safety.secrets.values`, :attr:`Policy.secret_files`): without a matching
rule, ``read_file`` and ``grep`` given a secret file are refused (``list_dir`` and ``glob``
show names only and stay allowed; ``recall_output`` takes no path, and tool outputs are
redacted elsewhere), and ``write_file``/``edit_file`` of one ask. A deny or ask rule decides as
usual; an allow rule wins only when it names the file (its last path part is not just
wildcards: ``read_file(.env)``, ``read_file(**/*.key)``), so ``allow read_file`` or
``read_file(**)`` written for other files does not hand out secrets.

Modes: ``structured`` asks; ``autonomous`` approves asks automatically, while the guard, deny
rules, the sandbox and the step limit stay on. ``write = false`` removes write tools entirely.

What leaves the machine (:data:`LEAVES_MACHINE`: ``git_push``, ``create_pull_request``) asks by
default in **both** modes: autonomous mode does not approve it unattended; only an allow rule
naming the tool lets it run unasked (``allow = ["git_push"]``). A force push is a flag
(:data:`FLAGS`): refused unless a rule names ``git_push(force)``.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, Literal

from steward.errors import ConfigError
from steward.safety.types import GuardVerdict, Opaque
from steward.secret_paths import DEFAULT_SECRET_FILES, is_secret_path

Action = Literal["allow", "ask", "deny"]
Mode = Literal["structured", "autonomous"]
ACTIONS: tuple[Action, ...] = ("deny", "ask", "allow")

READ_TOOLS = frozenset({"read_file", "list_dir", "glob", "grep", "recall_output"})
WRITE_TOOLS = frozenset({"write_file", "edit_file"})
PATH_TOOLS = READ_TOOLS | WRITE_TOOLS
COMMAND_TOOLS = frozenset({"bash"})
#: File tools that show what a file holds (``list_dir`` and ``glob`` show names only).
CONTENT_TOOLS = frozenset({"read_file", "grep"})
# steward-forge: tools that send the workspace's work off this machine (steward.tools.forge).
LEAVES_MACHINE = frozenset({"git_push", "create_pull_request"})

# --- flags of typed tools (git tools) ---------------------------------------------------
FLAGS: dict[str, tuple[str, ...]] = {"git_commit": ("no_verify",), "git_push": ("force",)}
"""Boolean arguments that run only when a rule names them: ``allow = ["git_commit(no_verify)"]``.
A rule whose pattern is such a flag matches the calls that set it true; a bare ``allow git_commit``
does not cover them, and without an allow rule naming the flag such a call is refused (an ask
rule naming it asks instead)."""


def _flag_on(subject: str, flag: str) -> bool:
    """Whether the call whose arguments are ``subject`` (compact JSON) sets ``flag`` true."""
    try:
        arguments = json.loads(subject)
    except ValueError:
        return False
    return isinstance(arguments, dict) and arguments.get(flag) is True


# --- end of flags ------------------------------------------------------------------------

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
        if self.pattern in FLAGS.get(tool, ()):
            return _flag_on(subject, self.pattern)
        return fnmatch.fnmatchcase(subject, self.pattern)


def _command_match(command: str, pattern: str) -> bool:
    # "rm *" also covers a bare "rm" (e.g. the command xargs runs with its input as arguments).
    return fnmatch.fnmatchcase(command, pattern) or (pattern.endswith(" *") and command == pattern[:-2])


def whole_program(rule: Rule) -> str | None:
    """The program a ``bash`` deny rule forbids with any arguments, or None.

    ``bash(rm *)`` and ``bash(rm*)`` → ``rm``; ``bash(/usr/bin/rm *)`` → ``/usr/bin/rm``. Not:
    ``bash(rm)`` (only ``rm`` without arguments), ``bash(rm -r*)`` (some arguments), a program
    part with wildcards (``bash(r? *)``), a rule without a pattern, or an ask or allow rule.
    """
    pattern = rule.pattern
    if rule.action != "deny" or pattern is None or not rule.matches_tool("bash"):
        return None
    if pattern.endswith(" *"):
        head = pattern[:-2]
    elif pattern.endswith("*"):
        head = pattern[:-1]
    else:
        return None
    return head if head and not any(ch in head for ch in "*?[] \t\\") else None


def could_apply(rule: Rule, known: str) -> bool:
    """Whether ``rule`` could match a command that begins with the words ``known``.

    ``known`` is what the guard could read of an :class:`Opaque` command; whatever follows is
    decided at run time, so "could" means: some continuation makes the pattern match.
    """
    if rule.pattern is None or not known:
        return True
    return any(
        _command_match(variant, rule.pattern) or _could_start(rule.pattern, variant + " ")
        for variant in command_variants(known)
    )


def _could_start(pattern: str, prefix: str) -> bool:
    """Whether some text beginning with ``prefix`` matches the glob ``pattern`` (fnmatch syntax)."""
    j = 0
    for ch in prefix:
        if j >= len(pattern):
            return False
        if pattern[j] == "*":
            return True  # the star takes the rest of the prefix; the continuation matches the rest
        end = _class_end(pattern, j)
        if end is not None:
            if not fnmatch.fnmatchcase(ch, pattern[j : end + 1]):
                return False
            j = end + 1
        elif pattern[j] in ("?", ch):
            j += 1
        else:
            return False
    return True  # any glob matches some text, so the prefix can be continued to a match


def _class_end(pattern: str, start: int) -> int | None:
    """The index of the ``]`` closing a ``[…]`` class at ``start`` (None: not a class)."""
    if pattern[start] != "[":
        return None
    k = start + 1
    if k < len(pattern) and pattern[k] == "!":
        k += 1
    if k < len(pattern) and pattern[k] == "]":
        k += 1
    end = pattern.find("]", k)
    return end if end >= 0 else None


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
    #: Asked because a deny or ask rule could match what the guard cannot read before it runs
    #: (:attr:`GuardVerdict.opaque`): never approved unattended, never "approved always".
    unsure: bool = False


@dataclass(slots=True)
class Policy:
    rules: list[Rule] = field(default_factory=list)
    mode: Mode = "structured"
    write: bool = True
    #: File-name globs of secret files: read_file/grep of one is refused and writing one asks,
    #: unless a rule naming the file says otherwise.
    secret_files: tuple[str, ...] = DEFAULT_SECRET_FILES
    #: Programs the sandbox masks, as :func:`whole_program` names them (the sandbox sets this
    #: from :attr:`steward.safety.policy.programs.MaskPlan.masked`): their deny rules need not fail
    #: closed on commands the guard cannot read. Empty: nothing is masked, every rule does.
    masked: frozenset[str] = frozenset()

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
        secret_files: Iterable[str] = DEFAULT_SECRET_FILES,
    ) -> Policy:
        rules = [Rule.parse(t, "allow", source) for t in allow]
        rules += [Rule.parse(t, "ask", source) for t in ask]
        rules += [Rule.parse(t, "deny", source) for t in deny]
        return cls(rules, mode, write, tuple(secret_files))

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
        subjects = _subjects(tool, arguments, verdict)
        decision = self._by_rules(tool, subjects, verdict, default)
        decision = self._flags(tool, arguments, decision)
        if decision.action != "deny" and tool in COMMAND_TOOLS:
            decision = self._unsure(tool, subjects, verdict) or decision
        if changed and decision.action != "deny":
            return self._changed(decision, changed)
        if decision.action == "ask" and self.mode == "autonomous":
            if tool in LEAVES_MACHINE:  # steward-forge: leaving the machine asks a human anyway
                return replace(decision, reason=f"{decision.reason} (asked in autonomous mode too: it "
                               "leaves the machine; an allow rule naming it runs it unasked)")  # fmt: skip
            return _unattended(decision, verdict)
        return decision

    def _flags(self, tool: str, arguments: Mapping[str, Any], decision: Decision) -> Decision:
        """Refuse a flag of ``FLAGS`` set true unless an allow rule names it (or an ask rule
        naming it asks); a deny decided already stands."""
        if decision.action == "deny":
            return decision
        for flag in FLAGS.get(tool, ()):
            if arguments.get(flag) is not True:
                continue
            if decision.rule is not None and decision.rule.action == "ask" and decision.rule.pattern == flag:
                continue
            if not any(
                r.action == "allow" and r.matches_tool(tool) and r.pattern == flag for r in self.rules
            ):
                fix = f'allow = ["{tool}({flag})"]'
                why = f"{tool} with {flag}=true runs only when a rule allows it"
                return Decision("deny", f"{why}; to allow it, add {fix} to [policy] in steward.toml "
                                f"(or call it without {flag})")  # fmt: skip
        return decision

    def _changed(self, decision: Decision, why: str) -> Decision:
        if self.mode == "autonomous":
            # Nobody has read the new description: the tool is not run unattended.
            return Decision("deny", f"{why}; a changed tool is not run unattended (autonomous mode)")
        return Decision("ask", why, network=decision.network, suggestion=decision.suggestion)

    def _by_rules(self, tool: str, subjects: Sequence[str], verdict: GuardVerdict, default: str) -> Decision:
        suggestion = _suggest(tool, subjects, exact=verdict.flagged)
        # Plumbing in porcelain words is matched by deny and ask rules; allow rules need not cover it.
        strict = [*subjects, *verdict.equivalents] if tool in COMMAND_TOOLS else list(subjects)
        for action in ("deny", "ask"):
            for rule in self.rules:
                if rule.action == action and any(rule.matches(tool, s) for s in strict):
                    if action == "deny":
                        return Decision("deny", f"denied by the rule deny {rule} ({rule.source})", rule)
                    # No "approve always" here: an allow rule could never outrank this ask rule.
                    return Decision("ask", f"the rule ask {rule} ({rule.source}) asks first", rule,
                                    network=verdict.network)  # fmt: skip
        allows = [r for r in self.rules if r.action == "allow"]
        covering = [next((r for r in allows if self._allows(r, tool, s)), None) for s in subjects]
        if subjects and all(covering):
            first = covering[0]
            return Decision("allow", f"allowed by the rule allow {first} ({first.source if first else ''})",
                            first, network=verdict.network)  # fmt: skip
        secret = self._secret(tool, subjects, suggestion)
        if secret is not None:
            return secret
        if default == "ask" and not verdict.blocked:
            return Decision("ask", "tools of this MCP server ask first unless a rule allows them",
                            network=verdict.network, suggestion=suggestion)  # fmt: skip
        return _default(tool, verdict, suggestion)

    def _is_secret(self, tool: str, path: str) -> bool:
        return tool in CONTENT_TOOLS | WRITE_TOOLS and is_secret_path(path, self.secret_files)

    def _allows(self, rule: Rule, tool: str, subject: str) -> bool:
        if not rule.matches(tool, subject):
            return False
        # Only a rule that names the file hands out a secret: its last path part is not all wildcards.
        return not self._is_secret(tool, subject) or bool(
            rule.pattern and rule.pattern.rsplit("/", 1)[-1].strip("*?[]!")
        )

    def _secret(self, tool: str, subjects: Sequence[str], suggestion: Rule | None) -> Decision | None:
        """The defaults for secret files: not shown by read_file/grep, asked about before writing."""
        if len(subjects) != 1 or not self._is_secret(tool, subjects[0]):
            return None
        path = subjects[0]
        fix = f'allow = ["{tool}({_literal(path)})"]'
        if tool in WRITE_TOOLS:
            reason = (
                f"{path} is a secret file (sandbox secret_files): writing it asks first; to let the agent"
            )
            return Decision("ask", f"{reason} write it unasked, add the rule {fix}", suggestion=suggestion)
        reason = f"{path} is a secret file (sandbox secret_files), so {tool} does not show it"
        return Decision("deny", f"{reason}; if the agent needs it, add the rule {fix} to the policy")

    def _unsure(self, tool: str, subjects: Sequence[str], verdict: GuardVerdict) -> Decision | None:
        """Ask about a command the guard cannot fully read when a deny or ask rule could match it."""
        # A rule that matches the command as written asks (or denies) whatever the rest turns out to be.
        open_rules = [r for r in self.rules if not any(r.matches(tool, s) for s in subjects)]
        for action in ("deny", "ask"):
            for opaque in verdict.opaque:
                rule = next(
                    (r for r in open_rules if r.action == action and self._may_hold(r, tool, opaque)), None
                )
                if rule is not None:
                    reason = (
                        f"cannot tell whether the rule {action} {rule} ({rule.source}) applies: {opaque.why} "
                        f"(in {opaque.command!r}); a human decides what cannot be judged before it runs"
                    )
                    return Decision("ask", reason, rule, network=verdict.network, unsure=True)
        return None

    def _may_hold(self, rule: Rule, tool: str, opaque: Opaque) -> bool:
        if rule.pattern is None or not rule.matches_tool(tool):
            return False  # a rule without a pattern has matched already
        if rule.action == "deny" and whole_program(rule) in self.masked:
            return False  # the sandbox masks the program: nothing can run it, by any name
        return could_apply(rule, opaque.known)


def _unattended(decision: Decision, verdict: GuardVerdict) -> Decision:
    """An ask in autonomous mode: approved, unless nobody could have judged what would run."""
    if decision.unsure:
        why = "what may match a deny or ask rule is not run unattended (autonomous mode)"
        return Decision("deny", f"{decision.reason}; {why}: write the command out in full", decision.rule)
    if any(f.category == "host_code" for f in verdict.findings):
        # Code the host runs later (a .pth, an editor task, a dotfile) is the user's to review.
        return Decision("deny", f"{decision.reason}; a file the host runs later is not written "
                        "unattended (autonomous mode)", decision.rule)  # fmt: skip
    if any(f.category == "unparsable" for f in verdict.findings):
        # What the guard cannot read, nobody has judged: without a human it is refused.
        return Decision("deny", f"{decision.reason}; a command the guard cannot read is not run "
                        "unattended (autonomous mode)")  # fmt: skip
    return Decision("allow", f"{decision.reason} (approved: autonomous mode)", decision.rule,
                    network=verdict.network, auto=True)  # fmt: skip


def _default(tool: str, verdict: GuardVerdict, suggestion: Rule | None) -> Decision:
    if verdict.flagged:
        return Decision("ask", f"the guard flags it: {verdict.reason()}", network=verdict.network,
                        suggestion=suggestion)  # fmt: skip
    if verdict.network:
        return Decision("ask", "it uses the network", network=True, suggestion=suggestion)
    if tool in LEAVES_MACHINE:  # steward-forge
        return Decision("ask", "it sends work off this machine; read what leaves before approving",
                        suggestion=suggestion)  # fmt: skip
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
    if tool in LEAVES_MACHINE:  # steward-forge: the tool (force stays refused: see FLAGS)
        return Rule("allow", tool, None, "approved")
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


class ModeSwitch:
    """A mode asked for from outside a run (the server, a job's worker), taken by the loop at the
    run's next step, so a step never changes mode half-way and the switch has a place in the log."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._asked: Mode | None = None

    def ask(self, mode: Mode) -> None:
        self._asked = mode

    def take(self) -> Mode | None:
        """The mode to switch to now (and switched to), or None when nothing changes."""
        asked, self._asked = self._asked, None
        if asked is None or asked == self.policy.mode:
            return None
        self.policy.mode = asked
        return asked
