"""Read a shell command line into the simple commands it would run.

The guard judges every command a line would execute, not its first word. This module turns a
command line into a flat tuple of :class:`SimpleCommand` values using tree-sitter's bash
grammar: lists (``;``, ``&&``, ``||``), pipelines, subshells, compound statements, ``$(…)``,
backticks and process substitution are walked; wrapper programs (``sudo``, ``env``,
``timeout``, ``xargs``, ``find -exec``, ``parallel``, ``builtin`` …) are unwrapped; and the
scripts handed to ``bash -c``, ``eval``, ``watch``, ``env -S``, ``flock -c``, ``script -c``,
``trap``, ``alias`` or a shell reading a heredoc are parsed in turn, as is the program that
``hash -p PATH NAME`` puts behind a name. ``python -c`` code is surfaced as one command with
origin ``python_c`` for the guard to inspect.

What the line itself cannot tell is marked, not guessed: :attr:`SimpleCommand.open_from` says
where a command's words stop being known before it runs (an expansion, a glob, the input
``xargs`` or ``find -exec`` put in, the arguments an alias is used with), and a command whose
program is unknown altogether (``bash <(…)``, ``parallel`` reading commands from its input) is
recorded with no ``argv`` and ``open_from == 0``. The policy fails closed on those.

Nothing here raises on bad input, and every walk is bounded: a syntax error, a line over
:data:`MAX_LENGTH` characters, nesting deeper than :data:`MAX_DEPTH`, more than
:data:`MAX_COMMANDS` commands or a pipeline of more than :data:`MAX_PIPELINE` programs sets
:attr:`ParsedShell.error`, and the commands that could be read are still returned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cache
from typing import Literal

import tree_sitter
import tree_sitter_bash

__all__ = [
    "MAX_COMMANDS",
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MAX_PIPELINE",
    "Origin",
    "ParsedShell",
    "SimpleCommand",
    "basename",
    "normalized",
    "parse_shell",
]

#: Deepest nesting of substitutions, subshells, ``bash -c``, ``eval`` and wrappers followed.
MAX_DEPTH = 8
#: Longest command line parsed; longer input is refused with ``error="too long"``.
MAX_LENGTH = 100_000
#: Most simple commands read from one line; a longer line is read up to here and reported.
MAX_COMMANDS = 1000
#: Most earlier stages remembered in ``pipe_from``; a longer pipeline is reported.
MAX_PIPELINE = 64
#: Deepest syntax tree walked (keeps Python's recursion limit out of reach).
_MAX_TREE_DEPTH = 400

Origin = Literal[
    "top",
    "substitution",
    "backticks",
    "process_substitution",
    "subshell",
    "bash_c",
    "eval",
    "wrapper",
    "python_c",
    "alias",
    "trap",
]


@dataclass(slots=True, frozen=True)
class SimpleCommand:
    """One command the shell would run, after quote removal."""

    #: Words after quote removal and escape resolution; words with expansions keep their text.
    argv: tuple[str, ...]
    #: Per word of ``argv``: it contains ``$…``, ``$(…)``, backticks or ``<(…)``.
    dynamic: tuple[bool, ...] = ()
    #: Leading ``VAR=value`` assignments (quotes removed from the value).
    assignments: tuple[str, ...] = ()
    #: ``(operator, target)`` pairs: ``(">", "out.txt")``, ``("<<", "EOF")``, ``("<<<", "text")``.
    redirects: tuple[tuple[str, str], ...] = ()
    #: The source text of the command.
    text: str = ""
    #: The command name was quoted, escaped or built from expansions (``\rm``, ``'r'm``, ``$CMD``).
    obfuscated: bool = False
    #: ``argv[0]`` of each command earlier in the same pipeline.
    pipe_from: tuple[str, ...] = ()
    origin: Origin = "top"
    #: Wrapper programs this command runs under, outermost first: ``("sudo", "env")``.
    wrappers: tuple[str, ...] = ()
    #: Index of the first word known only at run time: an expansion (``git $SUB``), a glob or
    #: brace pattern (``git p*``), or where ``xargs -I{}``/``find -exec … {}`` put their input;
    #: ``len(argv)`` when words are appended at run time (``xargs git``, an alias body); ``0``
    #: when the program itself is unknown. ``None``: every word is known.
    open_from: int | None = None
    #: Why the words from ``open_from`` on are unknown, for the human and the model.
    open_why: str = ""


@dataclass(slots=True, frozen=True)
class ParsedShell:
    commands: tuple[SimpleCommand, ...] = ()
    #: Why the line could not be read completely (syntax error, too long, too deep), or ``None``.
    error: str | None = None


def normalized(cmd: SimpleCommand) -> str:
    """The command's words joined by single spaces: what policy rules match against."""
    return " ".join(cmd.argv)


def parse_shell(command: str) -> ParsedShell:
    """Parse ``command`` into every simple command it would run; never raises."""
    if len(command) > MAX_LENGTH:
        return ParsedShell(error="too long")
    walker = _Walker()
    walker.parse_script(command, _Ctx())
    error = "; ".join(dict.fromkeys(walker.errors)) or None
    return ParsedShell(commands=tuple(walker.out), error=error)


# --- words ---------------------------------------------------------------------------------

_DYNAMIC_NODES = frozenset(
    {"simple_expansion", "expansion", "command_substitution", "process_substitution", "arithmetic_expansion"}
)
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_SUB_ORIGINS = frozenset({"substitution", "backticks", "process_substitution"})
# A name made only of these characters never needs quoting, so quoting it only hides it.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_./+:@%,=-]+")
_DQ_ESCAPABLE = frozenset('$`"\\\n')
_ANSI_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b"}
_ANSI_RE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|.)", re.DOTALL)


@dataclass(slots=True, frozen=True)
class _Word:
    text: str
    dynamic: bool = False
    #: Quotes or backslashes were removed while reading the word.
    quoted: bool = False
    #: Byte offset of the word in the text it was read from (for ``SimpleCommand.text``).
    start: int = 0
    #: Unquoted glob or brace pattern: the shell turns it into other words at run time.
    globbed: bool = False


def _decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def _unescape_plain(raw: str) -> str:
    out: list[str] = []
    chars = iter(raw)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, "")
            if nxt != "\n":
                out.append(nxt)
        else:
            out.append(ch)
    return "".join(out)


def _unescape_double(raw: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        if raw[i] == "\\" and i + 1 < len(raw) and raw[i + 1] in _DQ_ESCAPABLE:
            if raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
        else:
            out.append(raw[i])
            i += 1
    return "".join(out)


def _ansi_c(raw: str) -> str:
    body = raw[2:-1] if raw.startswith("$'") and raw.endswith("'") else raw

    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc[0] in "xuU" and len(esc) > 1:
            return chr(min(int(esc[1:], 16), 0x10FFFF))
        if esc[0].isdigit():
            return chr(int(esc, 8))
        return _ANSI_ESCAPES.get(esc, esc)

    return _ANSI_RE.sub(one, body)


def _word(node: tree_sitter.Node) -> _Word:
    """Quote removal for one word-like node."""
    kind = node.type
    raw = _decode(node.text)
    if kind == "word":
        return _Word(_unescape_plain(raw), quoted="\\" in raw, start=node.start_byte, globbed=_has_glob(raw))
    if kind == "raw_string":
        return _Word(raw[1:-1], quoted=True, start=node.start_byte)
    if kind == "ansi_c_string":
        return _Word(_ansi_c(raw), quoted=True, start=node.start_byte)
    if kind in ("string", "translated_string"):
        return _string(node)
    if kind == "concatenation":
        parts = [_word(c) for c in node.children]
        return _Word(
            "".join(p.text for p in parts),
            dynamic=any(p.dynamic for p in parts),
            quoted=any(p.quoted for p in parts),
            start=node.start_byte,
            globbed=any(p.globbed for p in parts) or _has_braces(node),
        )
    return _Word(raw, dynamic=kind in _DYNAMIC_NODES, start=node.start_byte)


def _string(node: tree_sitter.Node) -> _Word:
    raw = node.text or b""
    base = node.start_byte
    pieces: list[str] = []
    dynamic = False
    pos = base
    for child in node.children:
        # Text between children (tree-sitter does not always cover it) is string content too.
        pieces.append(_unescape_double(_decode(raw[pos - base : child.start_byte - base]).lstrip("$")))
        if child.type in _DYNAMIC_NODES:
            dynamic = True
            pieces.append(_decode(child.text))
        elif child.is_named:
            pieces.append(_unescape_double(_decode(child.text)))
        pos = child.end_byte
    return _Word("".join(pieces), dynamic=dynamic, quoted=True, start=base)


def _has_glob(raw: str) -> bool:
    """An unescaped ``*``, ``?`` or ``[…]`` in unquoted text: pathname expansion applies."""
    escaped = False
    for i, ch in enumerate(raw):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in "*?" or (ch == "[" and "]" in raw[i + 2 :]):
            return True
    return False


_BRACES = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")


def _has_braces(node: tree_sitter.Node) -> bool:
    """``p{u,}sh`` or ``{a..c}``: tree-sitter splits brace expansion into unquoted words."""
    opens = any(c.type == "word" and "{" in _decode(c.text) for c in node.children)
    return opens and _BRACES.search(_decode(node.text)) is not None


def _is_obfuscated(name: _Word) -> bool:
    if name.dynamic:
        # ``"$VENV/bin/python"`` names its program in the literal tail; ``$CMD`` does not.
        return not _literal_basename(name.text)
    return name.quoted and _PLAIN_NAME.fullmatch(name.text) is not None


def _literal_basename(text: str) -> str:
    tail = text.rsplit("/", 1)[-1] if "/" in text else ""
    return tail if tail and not re.search(r"[$`(){}]", tail) else ""


# --- walking -------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class _Ctx:
    origin: Origin = "top"
    depth: int = 0
    pipe_from: tuple[str, ...] = ()
    wrappers: tuple[str, ...] = ()
    #: Redirects of an enclosing ``{ …; } > f`` that apply to every command inside.
    redirects: tuple[tuple[str, str], ...] = ()
    #: Literal text piped in by an earlier ``echo``/``printf`` stage of the pipeline.
    stdin: str | None = None
    #: Why words are appended to the commands read here at run time ("" when none are).
    tail: str = ""
    #: A word containing this text is replaced at run time (``{}`` of ``xargs -I{}``).
    placeholder: str = ""

    def nested(self, origin: Origin) -> _Ctx:
        if origin in ("eval", "wrapper"):
            # The script runs as the command itself would: same stdin, wrappers and run-time words.
            return _Ctx(origin, self.depth + 1, self.pipe_from, self.wrappers, tail=self.tail,
                        placeholder=self.placeholder)  # fmt: skip
        if origin == "bash_c":
            # Words appended to ``sh -c SCRIPT`` become $0, $1 … (dynamic words), not a tail.
            return _Ctx(origin, self.depth + 1, self.pipe_from, self.wrappers, placeholder=self.placeholder)
        return _Ctx(origin=origin, depth=self.depth + 1)


@dataclass(slots=True)
class _Cmd:
    """A command being read: words plus what the shell hands it besides its arguments."""

    words: list[_Word]
    assignments: tuple[str, ...] = ()
    redirects: tuple[tuple[str, str], ...] = ()
    #: Text a heredoc or here-string feeds to the command's stdin.
    stdin: str | None = None
    text: str = ""
    source: bytes = b""


@cache
def _language() -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_bash.language())


class _Walker:
    def __init__(self) -> None:
        self.out: list[SimpleCommand] = []
        self.errors: list[str] = []
        self.handlers: dict[str, Callable[[tree_sitter.Node, _Ctx, int], None]] = {
            "command": self._command,
            "declaration_command": self._declaration,
            "unset_command": self._declaration,
            "redirected_statement": self._redirected,
            "pipeline": self._pipeline,
            "list": self._list,
            "subshell": self._nested_node,
            "command_substitution": self._nested_node,
            "process_substitution": self._nested_node,
        }

    def fail(self, error: str) -> None:
        if error not in self.errors:
            self.errors.append(error)

    # entry points --------------------------------------------------------------------------

    def parse_script(self, script: str, ctx: _Ctx) -> None:
        if ctx.depth > MAX_DEPTH:
            self.fail(f"nested deeper than {MAX_DEPTH} levels")
            return
        source = script.encode("utf-8", errors="replace")
        parser = tree_sitter.Parser(_language())
        tree = parser.parse(source)
        if tree.root_node.has_error and b"<>" in source:
            # The grammar lacks the read-write redirect ``<>``; read it as ``>`` (same offsets).
            retry = parser.parse(source.replace(b"<>", b"> "))
            tree = retry if not retry.root_node.has_error else tree
        root = tree.root_node
        if root.has_error:
            self.fail(_syntax_error(root))
        self.walk(root, ctx, 0)

    def walk(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        if level > _MAX_TREE_DEPTH:
            self.fail("command line nested too deeply to read")
            return
        if len(self.out) >= MAX_COMMANDS:
            self.fail(f"more than {MAX_COMMANDS} commands")
            return
        handler = self.handlers.get(node.type)
        if handler is not None:
            handler(node, ctx, level)
            return
        for child in node.children:
            self.walk(child, ctx, level + 1)

    # structure -----------------------------------------------------------------------------

    def _nested_node(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        origin: Origin
        if node.type == "subshell":
            origin = "subshell"
        elif node.type == "process_substitution":
            origin = "process_substitution"
        else:
            origin = "backticks" if node.children and node.children[0].type == "`" else "substitution"
        if ctx.depth + 1 > MAX_DEPTH:
            self.fail(f"nested deeper than {MAX_DEPTH} levels")
            return
        inner = ctx.nested(origin)
        if origin == "subshell":
            # A subshell inherits the pipeline position and redirects of where it stands.
            inner = replace(inner, pipe_from=ctx.pipe_from, redirects=ctx.redirects)
        for child in node.children:
            self.walk(child, inner, level + 1)

    def _redirected(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        redirects: list[tuple[str, str]] = []
        body: tree_sitter.Node | None = None
        for i, child in enumerate(node.children):
            if node.field_name_for_child(i) == "body":
                body = child
            elif child.type.endswith("redirect"):
                redirects.append(_redirect(child)[0])
        if body is None:
            # ``> file`` alone still creates or truncates the file.
            self.out.append(
                SimpleCommand(
                    argv=(),
                    redirects=tuple(redirects) + ctx.redirects,
                    text=_decode(node.text),
                    origin=ctx.origin,
                )
            )
        elif body.type == "pipeline":
            # tree-sitter hangs ``a | b > f`` on the pipeline; the redirect belongs to ``b``.
            self._pipeline(body, ctx, level + 1, last_redirects=tuple(redirects))
        elif body.type == "command":
            self._command(body, ctx, level + 1, outer=node)
        else:
            self.walk(body, replace(ctx, redirects=ctx.redirects + tuple(redirects)), level + 1)
        for child in _redirect_children(node):
            inner = [c for c in child.children if c.type == "pipeline"] if body is not None else []
            if child.type == "heredoc_redirect" and body is not None and inner:
                # tree-sitter hangs the rest of ``cat <<EOF | sh`` on the heredoc: those stages
                # read what the body writes (the heredoc's text when it is a plain ``cat``).
                producer, text = _heredoc_output(body, child)
                piped = replace(ctx, pipe_from=(*ctx.pipe_from, producer), stdin=text)
                self._pipeline(inner[0], piped, level + 1)
            else:
                self.walk(child, ctx, level + 1)

    def _list(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        # ``a && b || c`` nests to the left, one level per operator: walk the chain as a loop so
        # that a long chain cannot push a command past the tree-depth bound.
        rights: list[list[tree_sitter.Node]] = []
        while node.type == "list" and node.children:
            rights.append(node.children[1:])
            node = node.children[0]
        self.walk(node, ctx, level + 1)
        for tail in reversed(rights):
            for child in tail:
                self.walk(child, ctx, level + 1)

    def _pipeline(
        self, node: tree_sitter.Node, ctx: _Ctx, level: int, last_redirects: tuple[tuple[str, str], ...] = ()
    ) -> None:
        stages = [c for c in node.children if c.type not in ("|", "|&")]
        seen: list[str] = []
        piped: str | None = ctx.stdin  # the first stage reads what its context feeds it
        for index, stage in enumerate(stages):
            stage_ctx = replace(ctx, pipe_from=ctx.pipe_from + tuple(seen), stdin=piped)
            if index == len(stages) - 1 and last_redirects:
                stage_ctx = replace(stage_ctx, redirects=stage_ctx.redirects + last_redirects)
            start = len(self.out)
            self.walk(stage, stage_ctx, level + 1)
            emitted = [c for c in self.out[start:] if c.argv and c.origin not in _SUB_ORIGINS]
            seen.extend(c.argv[0] for c in emitted if c.argv[0] not in seen)
            if len(seen) > MAX_PIPELINE:
                self.fail(f"pipeline of more than {MAX_PIPELINE} different commands")
                del seen[MAX_PIPELINE:]
            simple = stage.type in ("command", "redirected_statement")
            piped = _printed_text(emitted[0].argv) if simple and emitted else None

    # commands ------------------------------------------------------------------------------

    def _command(
        self, node: tree_sitter.Node, ctx: _Ctx, level: int, outer: tree_sitter.Node | None = None
    ) -> None:
        cmd = _Cmd(words=[], text=_decode(node.text), source=node.text or b"")
        assignments: list[str] = []
        redirects: list[tuple[str, str]] = []
        redirect_nodes = list(_redirect_children(outer)) if outer is not None else []
        for i, child in enumerate(node.children):
            name = node.field_name_for_child(i)
            if child.type == "variable_assignment":
                assignments.append(_assignment(child))
            elif child.type.endswith("redirect"):
                redirect_nodes.append(child)
            elif name in ("name", "argument"):
                target = child.children[0] if child.type == "command_name" and child.children else child
                cmd.words.append(replace(_word(target), start=child.start_byte - node.start_byte))
        for rnode in redirect_nodes:
            pair, body = _redirect(rnode)
            redirects.append(pair)
            if body is not None:
                cmd.stdin = body
        cmd.assignments = tuple(assignments)
        cmd.redirects = tuple(redirects) + ctx.redirects
        cmd.stdin = cmd.stdin if cmd.stdin is not None else ctx.stdin
        if cmd.words:
            self.emit(cmd, ctx)
        elif cmd.redirects:
            self.out.append(SimpleCommand(argv=(), redirects=cmd.redirects, text=cmd.text, origin=ctx.origin))
        for child in node.children:
            if child.type != "command_name" or not _is_plain(child):
                self.walk(child, ctx, level + 1)

    def _declaration(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        words = [_Word(_decode(node.children[0].text))] if node.children else []
        for child in node.named_children:
            if child.type == "variable_assignment":
                words.append(_Word(_assignment(child), dynamic=_has_dynamic(child)))
            else:
                words.append(_word(child))
        if words:
            self.emit(_Cmd(words=words, text=_decode(node.text), source=node.text or b""), ctx)
        for child in node.children:
            self.walk(child, ctx, level + 1)

    def emit(self, cmd: _Cmd, ctx: _Ctx) -> None:
        """Record ``cmd`` and everything it runs in turn (wrapped commands, ``-c`` scripts)."""
        words = cmd.words
        open_from, open_why = _open_word(words, ctx)
        self.out.append(
            SimpleCommand(
                argv=tuple(w.text for w in words),
                dynamic=tuple(w.dynamic for w in words),
                assignments=cmd.assignments,
                redirects=cmd.redirects,
                text=cmd.text,
                obfuscated=_is_obfuscated(words[0]),
                pipe_from=ctx.pipe_from,
                origin=ctx.origin,
                wrappers=ctx.wrappers,
                open_from=open_from,
                open_why=open_why,
            )
        )
        _expand(self, cmd, ctx)

    def emit_unknown(self, cmd: _Cmd, ctx: _Ctx, why: str) -> None:
        """Record that ``cmd`` runs a program or script that only exists at run time."""
        self.out.append(
            SimpleCommand(
                argv=(),
                text=cmd.text,
                pipe_from=ctx.pipe_from,
                origin=ctx.origin,
                wrappers=ctx.wrappers,
                open_from=0,
                open_why=why,
            )
        )

    def emit_wrapped(self, cmd: _Cmd, index: int, ctx: _Ctx, wrapper: str) -> None:
        if index >= len(cmd.words):
            return
        if ctx.depth + 1 > MAX_DEPTH:
            self.fail(f"nested deeper than {MAX_DEPTH} levels")
            return
        inner_ctx = replace(ctx, origin="wrapper", depth=ctx.depth + 1, wrappers=(*ctx.wrappers, wrapper))
        start = cmd.words[index].start
        inner = replace(
            cmd,
            words=cmd.words[index:],
            assignments=(),
            text=_decode(cmd.source[start:]) if cmd.source else " ".join(w.text for w in cmd.words[index:]),
        )
        self.emit(inner, inner_ctx)

    def emit_python(self, code: str, ctx: _Ctx) -> None:
        if ctx.depth + 1 > MAX_DEPTH:
            self.fail(f"nested deeper than {MAX_DEPTH} levels")
            return
        self.out.append(
            SimpleCommand(
                argv=("python", "-c", code),
                dynamic=(False, False, "$" in code),
                text=code,
                pipe_from=ctx.pipe_from,
                origin="python_c",
                wrappers=ctx.wrappers,
            )
        )


def _printed_text(argv: tuple[str, ...]) -> str | None:
    """What ``echo …``/``printf …`` writes, roughly: enough to read a script piped into a shell."""
    name = basename(argv[0])
    args = [a for a in argv[1:] if not re.fullmatch(r"-[neE]+", a)] if name == "echo" else list(argv[1:])
    if name == "printf" and args:
        text = " ".join(args[1:]) if "%" in args[0] else args[0]
        return text.replace("\\n", "\n")
    return " ".join(args) if name == "echo" else None


def _heredoc_output(body: tree_sitter.Node, heredoc: tree_sitter.Node) -> tuple[str, str | None]:
    """The program of a redirected statement's body, and what it writes when that is known: the
    heredoc's text for a ``cat`` without file operands."""
    words = [c for c in body.children if c.type in ("command_name", "word")] if body.type == "command" else []
    name = basename(_decode(words[0].text)) if words else _decode(body.text).split(" ", 1)[0]
    if name == "cat" and len(words) == 1:
        return name, _redirect(heredoc)[1]
    return name, None


def _redirect_children(node: tree_sitter.Node) -> Iterable[tree_sitter.Node]:
    return (c for c in node.children if c.type.endswith("redirect"))


def _is_plain(node: tree_sitter.Node) -> bool:
    return not _has_dynamic(node)


def _has_dynamic(node: tree_sitter.Node) -> bool:
    if node.type in _SUBSTITUTIONS:
        return True
    return any(_has_dynamic(c) for c in node.children)


def _assignment(node: tree_sitter.Node) -> str:
    name = ""
    value = ""
    for i, child in enumerate(node.children):
        field_name = node.field_name_for_child(i)
        if field_name == "name":
            name = _decode(child.text)
        elif field_name == "value":
            value = _word(child).text
    return f"{name}={value}"


def _redirect(node: tree_sitter.Node) -> tuple[tuple[str, str], str | None]:
    """``((operator, target), stdin_text)`` for a redirect node."""
    operator = ""
    target = ""
    body: str | None = None
    for i, child in enumerate(node.children):
        field_name = node.field_name_for_child(i)
        if child.type == "heredoc_start":
            target = _decode(child.text).strip("'\"")
        elif child.type == "heredoc_body":
            body = _decode(child.text)
        elif field_name == "descriptor" or child.type == "heredoc_end":
            continue
        elif not child.is_named:
            operator = operator or _decode(child.text)
        elif not target:
            target = _word(child).text
    if node.type == "herestring_redirect":
        body = target
    return (operator, target), body


def _syntax_error(root: tree_sitter.Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            row, col = node.start_point
            what = f"missing {node.type!r}" if node.is_missing else f"unexpected {_decode(node.text)[:20]!r}"
            return f"syntax error at line {row + 1}, column {col + 1}: {what}"
        stack.extend(reversed(node.children))
    return "syntax error"


# --- what a command runs in turn ----------------------------------------------------------

_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "ash", "mksh", "busybox-sh"})
_PYTHON = re.compile(r"python[0-9.]*|pypy[0-9.]*")
#: A word starting so is the output of a command: as a script, it is text made at run time.
_SUBSTITUTED = ("<(", "$(", "`")

_PARALLEL = (
    "adEIjLnNPSsC",
    frozenset({"--arg-file", "--delimiter", "--jobs", "--max-args", "--sshlogin", "--colsep", "--results",
               "--joblog", "--tmpdir", "--workdir", "--env", "--max-replace-args"}),
    0,
)  # fmt: skip

# wrapper -> (short options taking a value, long options taking a value, positionals before the command)
# fmt: off
_WRAPPERS: dict[str, tuple[str, frozenset[str], int]] = {
    "sudo": ("ugCDhprtTU", frozenset({"--user", "--group", "--chdir", "--host", "--prompt", "--role"}), 0),
    "doas": ("uC", frozenset(), 0),
    "env": ("uCS", frozenset({"--unset", "--chdir", "--split-string"}), 0),
    "timeout": ("sk", frozenset({"--signal", "--kill-after"}), 1),
    "nice": ("n", frozenset({"--adjustment"}), 0),
    "nohup": ("", frozenset(), 0),
    # -i, -l and -e take their value attached or not at all (``-i`` means ``-I {}``).
    "xargs": ("ILnPdEsa", frozenset({"--max-args", "--max-procs", "--delimiter", "--arg-file"}), 0),
    "command": ("", frozenset(), 0),
    "builtin": ("", frozenset(), 0),
    "exec": ("a", frozenset(), 0),
    "coproc": ("", frozenset(), 0),
    "time": ("fo", frozenset({"--format", "--output"}), 0),
    "stdbuf": ("ioe", frozenset({"--input", "--output", "--error"}), 0),
    "ionice": ("cnp", frozenset({"--class", "--classdata", "--pid"}), 0),
    "setsid": ("", frozenset(), 0),
    "chroot": ("", frozenset({"--userspec", "--groups"}), 1),
    "watch": ("ndq", frozenset({"--interval", "--differences"}), 0),
    "strace": ("oepsuEIPbSX", frozenset({"--output", "--expr"}), 0),
    "ltrace": ("oepsuEn", frozenset({"--output"}), 0),
    "valgrind": ("", frozenset(), 0),
    "caffeinate": ("tw", frozenset(), 0),
    "unbuffer": ("", frozenset(), 0),
    "torsocks": ("", frozenset(), 0),
    "proxychains": ("f", frozenset(), 0),
    "proxychains4": ("f", frozenset(), 0),
    "busybox": ("", frozenset(), 0),
    "flock": ("wE", frozenset({"--timeout", "--wait", "--conflict-exit-code"}), 1),
    "unshare": ("SGRw", frozenset({"--setuid", "--setgid", "--root", "--wd", "--propagation", "--map-user",
                                   "--map-group", "--setgroups"}), 0),
    "nsenter": ("tSG", frozenset({"--target", "--setuid", "--setgid"}), 0),
    "taskset": ("", frozenset(), 1),
    "chrt": ("TPD", frozenset({"--sched-runtime", "--sched-period", "--sched-deadline"}), 1),
    "prlimit": ("po", frozenset({"--pid", "--output"}), 0),
    "setpriv": ("", frozenset({"--reuid", "--regid", "--ruid", "--euid", "--rgid", "--egid", "--groups",
                               "--inh-caps", "--ambient-caps", "--bounding-set", "--securebits"}), 0),
    "fakeroot": ("lisb", frozenset({"--lib", "--faked"}), 0),
    "faketime": ("p", frozenset(), 1),
    "firejail": ("", frozenset(), 0),
    "systemd-run": ("upEHM", frozenset({"--unit", "--property", "--setenv", "--uid", "--gid", "--nice",
                                        "--working-directory", "--slice", "--description", "--host",
                                        "--machine"}), 0),
    "cgexec": ("g", frozenset(), 0),
    "numactl": ("imNCp", frozenset({"--interleave", "--membind", "--cpunodebind", "--physcpubind",
                                    "--preferred"}), 0),
    "ssh-agent": ("aEtPO", frozenset(), 0),
    "dbus-run-session": ("", frozenset({"--config-file", "--dbus-daemon"}), 0),
    "xvfb-run": ("nsfepw", frozenset({"--server-num", "--server-args", "--auth-file", "--error-file"}), 0),
    "eatmydata": ("", frozenset(), 0),
    "catchsegv": ("", frozenset(), 0),
    "dumb-init": ("", frozenset({"--rewrite"}), 0),
    "gosu": ("", frozenset(), 1),
    "su-exec": ("", frozenset(), 1),
    "parallel": _PARALLEL,
    "sem": _PARALLEL,
}
# fmt: on
#: Options that hand a wrapper a whole script instead of a command: ``env -S``, ``flock -c``.
_SCRIPT_OPTIONS: dict[str, tuple[str, ...]] = {
    "env": ("-S", "--split-string"),
    "flock": ("-c", "--command"),
}


def basename(word: str) -> str:
    """The program name of ``argv[0]``: ``/usr/bin/rm`` → ``rm``, ``"$VENV/bin/python"`` → ``python``."""
    return word.rsplit("/", 1)[-1] if "/" in word else word


def _open_word(words: list[_Word], ctx: _Ctx) -> tuple[int | None, str]:
    """Where a command's words stop being known before it runs, and why (see ``open_from``)."""
    for i, word in enumerate(words):
        if ctx.placeholder and ctx.placeholder in word.text:
            wrapper = ctx.wrappers[-1] if ctx.wrappers else "its wrapper"
            return i, f"{word.text!r} is replaced at run time by what {wrapper} reads"
        if i == 0:
            if (word.dynamic and not _literal_basename(word.text)) or word.globbed:
                return 0, f"the program name {word.text!r} is computed at run time"
        elif word.dynamic:
            return i, f"{word.text!r} is expanded at run time"
        elif word.globbed:
            return i, f"{word.text!r} is a pattern the shell replaces with file names at run time"
    if ctx.tail:
        return len(words), ctx.tail
    return None, ""


def _substituted(word: _Word) -> bool:
    return word.dynamic and word.text.startswith(_SUBSTITUTED)


def _expand(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    name = basename(cmd.words[0].text)
    handler = _EXPANDERS.get(name)
    if handler is not None:
        handler(walker, cmd, ctx)
    elif name in _WRAPPERS:
        _unwrap(walker, cmd, ctx, name)
    elif name in _SHELLS:
        _shell(walker, cmd, ctx)
    elif _PYTHON.fullmatch(name):
        _python(walker, cmd, ctx)


def _python(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    code = _python_code([w.text for w in cmd.words[1:]])
    if code is not None:
        walker.emit_python(code, ctx)
    elif cmd.stdin is not None and _reads_stdin_script([w.text for w in cmd.words[1:]]):
        walker.emit_python(cmd.stdin, ctx)


def _eval(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    if len(cmd.words) > 1:
        walker.parse_script(" ".join(w.text for w in cmd.words[1:]), ctx.nested("eval"))


def _source(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    # A script file is a program like any other; ``source <(…)`` runs text made at run time.
    if len(cmd.words) > 1 and _substituted(cmd.words[1]):
        why = f"{cmd.words[0].text} runs a script produced at run time ({cmd.words[1].text})"
        walker.emit_unknown(cmd, ctx, why)
    elif len(cmd.words) > 1 and cmd.words[1].text in STDIN_FILES:
        _stdin_program(walker, cmd, ctx)  # ``. /dev/stdin <<< '…'``: the script is what stdin holds


STDIN_FILES = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
"""Names of the standard input: a shell given one as its script reads its program from stdin."""


def _stdin_program(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    """A shell that reads its program from stdin: the literal text a heredoc, here-string or
    ``echo`` stage feeds it is read as a script; anything another program writes into the pipe
    (``cat <<EOF | sh``, ``python gen.py | bash``) is known only at run time."""
    if cmd.stdin is not None:
        walker.parse_script(cmd.stdin, ctx.nested("bash_c"))
    elif ctx.pipe_from:
        why = f"{cmd.words[0].text} runs what {ctx.pipe_from[-1]} writes into the pipe (known at run time)"
        walker.emit_unknown(cmd, ctx, why)


def _unwrap(walker: _Walker, cmd: _Cmd, ctx: _Ctx, name: str) -> None:
    args = [w.text for w in cmd.words]
    if name == "command" and any(a in ("-v", "-V") for a in args[1:2]):
        return  # ``command -v rm`` looks a program up; it runs nothing
    index, script = _skip_options(args, name)
    if script is None and name == "watch" and index < len(args) and "-x" not in args[1:index]:
        script = " ".join(args[index:])  # watch hands its arguments to ``sh -c`` as one string
    if script is not None:
        walker.parse_script(script, replace(ctx.nested("wrapper"), wrappers=(*ctx.wrappers, name)))
    else:
        walker.emit_wrapped(cmd, index, ctx, name)


def _skip_options(args: list[str], name: str) -> tuple[int, str | None]:
    """Index of the wrapped command in ``args`` (and the script of ``env -S`` or ``flock -c``)."""
    short, long, positionals = _WRAPPERS[name]
    scripts = _SCRIPT_OPTIONS.get(name, ())
    i = 1
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg in scripts and i + 1 < len(args):
            return len(args), args[i + 1]
        if name in ("env", "sudo") and "=" in arg and not arg.startswith("-"):
            i += 1
            continue
        if not arg.startswith("-") or arg == "-":
            if arg == "-" and name == "env":
                i += 1
                continue
            break
        i += (2 if arg in long else 1) if arg.startswith("--") else _short_option_width(arg, short)
    index = i + positionals
    if index + 1 < len(args) and args[index] in scripts:
        return len(args), args[index + 1]  # ``flock FILE -c SCRIPT``
    return index, None


def _short_option_width(arg: str, takes_value: str) -> int:
    """How many words a cluster of short options such as ``-oL`` or ``-n 5`` spans."""
    for pos, letter in enumerate(arg[1:], start=1):
        if letter in takes_value:
            return 1 if pos < len(arg) - 1 else 2
    return 1


def _xargs(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    args = [w.text for w in cmd.words]
    index, _ = _skip_options(args, "xargs")
    placeholder = _xargs_placeholder(args[1:index])
    if placeholder:
        inner = replace(ctx, placeholder=placeholder, tail="")  # with -I nothing is appended
    else:
        inner = replace(ctx, tail="xargs appends the words it reads from its input", placeholder="")
    walker.emit_wrapped(cmd, index, inner, "xargs")


def _xargs_placeholder(options: list[str]) -> str:
    """The replace string of ``-I R``, ``-iR``, ``--replace[=R]`` ("" when input is appended)."""
    for i, option in enumerate(options):
        if option.startswith("--replace"):
            return option.partition("=")[2] or "{}"
        if option.startswith("--") or not option.startswith("-"):
            continue
        for letter in "Ii":
            pos = option.find(letter, 1)
            if pos > 0:
                value = option[pos + 1 :]
                if letter == "I" and not value and i + 1 < len(options):
                    value = options[i + 1]
                return value or "{}"
    return ""


def _find_exec(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    args = [w.text for w in cmd.words]
    inner = replace(ctx, placeholder="{}", tail="")
    for i, arg in enumerate(args):
        if arg in ("-exec", "-execdir", "-ok", "-okdir") and i + 1 < len(args):
            end = next((j for j in range(i + 1, len(args)) if args[j] in (";", "+")), len(args))
            words = cmd.words[i + 1 : end]
            if words:
                walker.emit_wrapped(replace(cmd, words=words, stdin=None), 0, inner, "find")


def _parallel(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    """GNU ``parallel``/``sem``: a command template, run through a shell with arguments put in."""
    args = [w.text for w in cmd.words]
    name = basename(args[0])
    index, _ = _skip_options(args, name)
    end = next((j for j in range(index, len(args)) if args[j].startswith(":::")), len(args))
    options = args[1:index]
    placeholder = next((options[i + 1] for i, o in enumerate(options[:-1]) if o == "-I"), "{")
    inner = replace(ctx.nested("wrapper"), wrappers=(*ctx.wrappers, name))
    if index < end:
        tail = f"{name} appends the arguments it is given at run time"
        walker.parse_script(" ".join(args[index:end]), replace(inner, placeholder=placeholder, tail=tail))
    elif end < len(args) and args[end] == ":::":
        for script in args[end + 1 :]:  # no template: each argument is a command line
            if script.startswith(":::"):
                break
            walker.parse_script(script, inner)
    else:
        walker.emit_unknown(cmd, ctx, f"{name} runs the command lines it reads from its input")


def _script_command(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    """``script -qc CMD /dev/null`` runs CMD in a new terminal."""
    args = [w.text for w in cmd.words]
    for i, arg in enumerate(args[1:-1], 1):
        short = arg.startswith("-") and not arg.startswith("--") and arg.endswith("c")
        if short or arg == "--command":
            walker.parse_script(
                args[i + 1], replace(ctx.nested("wrapper"), wrappers=(*ctx.wrappers, "script"))
            )
            return


def _alias(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    """``alias NAME=BODY``: BODY runs wherever NAME is used later, with that use's words appended."""
    for word in cmd.words[1:]:
        name, equals, body = word.text.partition("=")
        if equals and body.strip() and not name.startswith("-"):
            why = f"the alias {name} runs this with the words it is used with appended"
            walker.parse_script(body, replace(ctx.nested("alias"), tail=why))


def _trap(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    """``trap BODY SIG…`` runs BODY later, on the signal or at exit."""
    args = [w.text for w in cmd.words[1:]]
    if args[:1] == ["--"]:
        args = args[1:]
    # ``trap -p``/``trap -l`` list; ``trap - SIG`` and ``trap SIG`` reset: nothing new runs.
    if len(args) >= 2 and not args[0].startswith("-"):
        walker.parse_script(args[0], ctx.nested("trap"))


def _hash(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    """``hash -p PATH NAME``: NAME now runs PATH, whatever PATH is called."""
    words = cmd.words
    for i, word in enumerate(words[1:-2], 1):
        if word.text.startswith("-") and not word.text.startswith("--") and word.text.endswith("p"):
            target, names = words[i + 1], " ".join(w.text for w in words[i + 2 :])
            why = f"hash -p makes {names} run {target.text} with the words it is used with appended"
            inner = replace(ctx.nested("alias"), tail=why)
            if inner.depth > MAX_DEPTH:
                walker.fail(f"nested deeper than {MAX_DEPTH} levels")
                return
            walker.emit(_Cmd(words=[replace(target, start=0)], text=target.text), inner)
            return


def _shell(walker: _Walker, cmd: _Cmd, ctx: _Ctx) -> None:
    args = [w.text for w in cmd.words]
    script = _dash_c_script(args)
    if script is not None:
        walker.parse_script(script, ctx.nested("bash_c"))
    elif _reads_stdin_script(args[1:]) or any(a in STDIN_FILES for a in args[1:2]):
        _stdin_program(walker, cmd, ctx)
    else:
        operand = next((w for w in cmd.words[1:] if not w.text.startswith(("-", "+"))), None)
        if operand is not None and _substituted(operand):
            walker.emit_unknown(cmd, ctx, f"{args[0]} runs a script produced at run time ({operand.text})")


_EXPANDERS: dict[str, Callable[[_Walker, _Cmd, _Ctx], None]] = {
    "eval": _eval,
    "source": _source,
    ".": _source,
    "xargs": _xargs,
    "find": _find_exec,
    "parallel": _parallel,
    "sem": _parallel,
    "script": _script_command,
    "alias": _alias,
    "trap": _trap,
    "hash": _hash,
}


def _dash_c_script(args: list[str]) -> str | None:
    has_c = False
    i = 1
    while i < len(args):
        arg = args[i]
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            has_c = has_c or "c" in arg[1:]
        elif not arg.startswith("--") and not arg.startswith("+"):
            return arg if has_c else None
        i += 1
    return None


def _reads_stdin_script(args: list[str]) -> bool:
    """The interpreter reads its program from stdin: no arguments, ``-``, or only options."""
    return all(a.startswith("-") for a in args)


def _python_code(args: list[str]) -> str | None:
    """The program of ``python [options] -c PROGRAM``, or None when python runs a file or module."""
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg in ("-", "-m", "--"):
            return None
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            i += 2
            continue
        if not arg.startswith("--") and "c" in arg[1:]:
            rest = arg[arg.index("c") + 1 :]
            return rest or (args[i + 1] if i + 1 < len(args) else None)
        i += 1
    return None
