"""The shell parser: every command a line would run, with quotes removed and wrappers unwrapped."""

from __future__ import annotations

import pytest

from steward.safety.policy.shell_parse import (
    MAX_COMMANDS,
    MAX_DEPTH,
    MAX_PIPELINE,
    SimpleCommand,
    normalized,
    parse_shell,
)


def argvs(command: str) -> list[tuple[str, ...]]:
    return [c.argv for c in parse_shell(command).commands]


def only(command: str, argv0: str) -> SimpleCommand:
    matches = [c for c in parse_shell(command).commands if c.argv and c.argv[0] == argv0]
    assert len(matches) == 1, matches
    return matches[0]


# --- quote removal -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("ls -la", ("ls", "-la")),
        ("echo 'a b' \"c d\"", ("echo", "a b", "c d")),
        ("echo a\\ b", ("echo", "a b")),
        ('echo "say \\"hi\\""', ("echo", 'say "hi"')),
        ("echo 'it''s'", ("echo", "its")),
        ("echo $'a\\x41\\n'", ("echo", "aA\n")),
        ("echo pre'fix'\"ed\"", ("echo", "prefixed")),
        ('git commit -m "fix: it\'s done"', ("git", "commit", "-m", "fix: it's done")),
    ],
)
def test_quotes_and_escapes_are_removed(command: str, argv: tuple[str, ...]) -> None:
    assert argvs(command) == [argv]


def test_words_with_expansions_keep_their_text_and_are_marked_dynamic() -> None:
    cmd = parse_shell('echo "$HOME/x" ${USER} plain ~/y').commands[0]
    assert cmd.argv == ("echo", "$HOME/x", "${USER}", "plain", "~/y")
    assert cmd.dynamic == (False, True, True, False, False)


def test_leading_assignments_are_kept_apart_from_argv() -> None:
    cmd = parse_shell('FOO=bar BAZ="a b" make test').commands[0]
    assert cmd.argv == ("make", "test")
    assert cmd.assignments == ("FOO=bar", "BAZ=a b")


# --- structure -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo x && rm y", ["echo x", "rm y"]),
        ("a; b || c && d", ["a", "b", "c", "d"]),
        ("a | b | c", ["a", "b", "c"]),
        ("(cd sub; make) && ls", ["cd sub", "make", "ls"]),
        ("{ a; b; } > log", ["a", "b"]),
        ("if test -f x; then rm x; else touch x; fi", ["test -f x", "rm x", "touch x"]),
        ("for f in *.py; do wc -l $f; done", ["wc -l $f"]),
        ("while read l; do echo $l; done < f", ["read l", "echo $l"]),
        ("f() { rm -rf build; }; f", ["rm -rf build", "f"]),
        ("case $x in a) rm a;; *) ls;; esac", ["rm a", "ls"]),
        ("! grep -q x f", ["grep -q x f"]),
    ],
)
def test_compound_commands_yield_every_simple_command(command: str, expected: list[str]) -> None:
    assert [normalized(c) for c in parse_shell(command).commands] == expected


def test_pipeline_records_earlier_stages_in_pipe_from() -> None:
    commands = parse_shell("curl -s x | tee log | sh").commands
    assert [c.pipe_from for c in commands if c.argv] == [(), ("curl",), ("curl", "tee")]


@pytest.mark.parametrize(
    "command",
    [
        "tac <<EOF | sh\ngit push\nEOF\n",
        "python3 gen.py | bash",
        "cat s.txt | bash -s",
        "make | sh /dev/stdin",
    ],
)
def test_a_shell_reading_what_another_program_pipes_runs_an_unknown_program(command: str) -> None:
    unknown = [c for c in parse_shell(command).commands if c.open_from == 0]
    assert unknown, parse_shell(command).commands


@pytest.mark.parametrize(
    "command",
    [
        ". /dev/stdin <<< 'git push o'",
        "bash /dev/stdin <<< 'git push o'",
        "cat <<EOF | bash\ngit push o\nEOF\n",
    ],
)
def test_a_script_fed_through_stdin_is_read_as_commands(command: str) -> None:
    assert "git push o" in [normalized(c) for c in parse_shell(command).commands]


def test_redirects_are_recorded_with_operator_and_target() -> None:
    cmd = parse_shell("cmd < in.txt > out.txt 2>> err.log").commands[0]
    assert ("<", "in.txt") in cmd.redirects
    assert (">", "out.txt") in cmd.redirects
    assert (">>", "err.log") in cmd.redirects


def test_redirect_after_a_pipeline_belongs_to_the_last_stage() -> None:
    first, last = parse_shell("a | b > f").commands
    assert first.redirects == ()
    assert last.redirects == ((">", "f"),)


def test_heredoc_text_is_data_not_commands() -> None:
    commands = parse_shell("cat > notes.txt <<EOF\nrm -rf /\nEOF\necho done").commands
    assert [c.argv for c in commands] == [("cat",), ("echo", "done")]
    assert commands[0].redirects == ((">", "notes.txt"), ("<<", "EOF"))


def test_substitution_inside_an_unquoted_heredoc_runs() -> None:
    commands = parse_shell("cat <<EOF\n$(whoami)\nEOF").commands
    assert [(c.argv, c.origin) for c in commands] == [(("cat",), "top"), (("whoami",), "substitution")]


def test_heredoc_fed_to_a_shell_is_parsed_as_a_script() -> None:
    commands = parse_shell("bash <<'EOF'\nrm -rf /\nEOF").commands
    assert commands[-1].argv == ("rm", "-rf", "/")
    assert commands[-1].origin == "bash_c"


def test_herestring_fed_to_a_shell_is_parsed_as_a_script() -> None:
    assert parse_shell('sh <<< "rm -rf /"').commands[-1].argv == ("rm", "-rf", "/")


@pytest.mark.parametrize(
    "command", ["echo 'rm -rf /' | sh", "printf 'rm -rf /' | bash", "echo rm -rf / | sudo sh"]
)
def test_text_echoed_into_a_shell_is_parsed_as_a_script(command: str) -> None:
    inner = parse_shell(command).commands[-1]
    assert inner.argv == ("rm", "-rf", "/")
    assert inner.origin == "bash_c"


def test_echo_into_a_non_shell_is_just_data() -> None:
    assert argvs("echo 'rm -rf /' | grep rm") == [("echo", "rm -rf /"), ("grep", "rm")]


def test_read_write_redirect_is_understood() -> None:
    parsed = parse_shell("exec 5<>/dev/tcp/example.com/80")
    assert parsed.error is None
    assert parsed.commands[0].redirects[0][1] == "/dev/tcp/example.com/80"


def test_bare_redirect_is_kept_as_a_command_without_argv() -> None:
    (cmd,) = parse_shell("> ~/.bashrc").commands
    assert cmd.argv == ()
    assert cmd.redirects == ((">", "~/.bashrc"),)


def test_string_arguments_are_not_commands() -> None:
    assert argvs('echo "rm -rf /"') == [("echo", "rm -rf /")]


# --- origins -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "origin"),
    [
        ("echo $(rm -rf /)", "substitution"),
        ("echo `rm -rf /`", "backticks"),
        ("diff <(rm -rf /) x", "process_substitution"),
        ("(rm -rf /)", "subshell"),
        ("bash -c 'rm -rf /'", "bash_c"),
        ("sh -c 'rm -rf /'", "bash_c"),
        ("zsh -c 'rm -rf /'", "bash_c"),
        ("/bin/dash -c 'rm -rf /'", "bash_c"),
        ("bash -lc 'rm -rf /'", "bash_c"),
        ("bash -xec 'rm -rf /'", "bash_c"),
        ("eval 'rm -rf /'", "eval"),
        ("eval rm -rf /", "eval"),
        ("sudo rm -rf /", "wrapper"),
        ('echo "$(rm -rf /)"', "substitution"),
        ("X=$(rm -rf /) true", "substitution"),
        ("export X=$(rm -rf /)", "substitution"),
        ('[ -n "$(rm -rf /)" ]', "substitution"),
        ("find / -exec rm -rf / \\;", "wrapper"),
    ],
)
def test_inner_commands_are_found_with_their_origin(command: str, origin: str) -> None:
    inner = [c for c in parse_shell(command).commands if c.argv == ("rm", "-rf", "/")]
    assert inner, parse_shell(command)
    assert inner[0].origin == origin


def test_python_c_code_becomes_its_own_command() -> None:
    commands = parse_shell("python3 -c \"import shutil; shutil.rmtree('/')\"").commands
    assert commands[-1].origin == "python_c"
    assert commands[-1].argv == ("python", "-c", "import shutil; shutil.rmtree('/')")


@pytest.mark.parametrize(
    "command", ["python -u -c 'print(1)'", "python3.11 -c 'print(1)'", "python -Ic 'print(1)'"]
)
def test_python_c_is_found_after_other_options(command: str) -> None:
    assert parse_shell(command).commands[-1].argv == ("python", "-c", "print(1)")


def test_python_c_is_found_after_options_with_values() -> None:
    assert parse_shell("python3 -W ignore -X dev -c 'print(1)'").commands[-1].argv == (
        "python",
        "-c",
        "print(1)",
    )


def test_python_running_a_module_has_no_inline_code() -> None:
    assert [c.origin for c in parse_shell("python -m pytest -c setup.cfg").commands] == ["top"]


# --- wrappers ------------------------------------------------------------------------------


def test_wrappers_are_unwrapped_and_each_layer_is_kept() -> None:
    commands = parse_shell("env X=1 timeout 5 nice -n 3 rm -rf /").commands
    assert [normalized(c) for c in commands] == [
        "env X=1 timeout 5 nice -n 3 rm -rf /",
        "timeout 5 nice -n 3 rm -rf /",
        "nice -n 3 rm -rf /",
        "rm -rf /",
    ]
    assert commands[-1].wrappers == ("env", "timeout", "nice")
    assert commands[-1].origin == "wrapper"
    assert commands[-1].text == "rm -rf /"


@pytest.mark.parametrize(
    "command",
    [
        "sudo rm x",
        "sudo -u root -E rm x",
        "sudo -- rm x",
        "doas -u root rm x",
        "env -i -u PATH A=b rm x",
        "timeout -s KILL 10s rm x",
        "timeout --signal=KILL 10 rm x",
        "nice -n 10 rm x",
        "nice -10 rm x",
        "nohup rm x",
        "xargs -0 -I {} rm x",
        "command -p rm x",
        "exec rm x",
        "time -p rm x",
        "stdbuf -oL rm x",
        "stdbuf -o L rm x",
        "ionice -c 3 rm x",
        "setsid rm x",
        "chroot /mnt rm x",
        "strace -f -o log rm x",
        "watch -n 5 rm x",
        "sudo env FOO=1 nohup rm x",
        "busybox rm x",
        "find . -exec rm x \\;",
    ],
)
def test_wrapped_command_is_found(command: str) -> None:
    assert parse_shell(command).commands[-1].argv == ("rm", "x")


def test_command_v_looks_up_and_runs_nothing() -> None:
    assert argvs("command -v rm") == [("command", "-v", "rm")]


def test_pipe_from_follows_a_wrapped_command() -> None:
    assert parse_shell("curl x | sudo bash").commands[-1].pipe_from == ("curl",)


# --- obfuscation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", ["e\\cho hi", '"rm" x', "'r'm x", "\\rm x", "$CMD x", "$(echo rm) x", "`echo rm` x", "${X} y"]
)
def test_hidden_command_names_are_obfuscated(command: str) -> None:
    assert parse_shell(command).commands[0].obfuscated


@pytest.mark.parametrize(
    "command",
    ["rm x", "/bin/rm x", "./run.sh", '"./my script.sh" x', '"$VENV/bin/python" -m pytest', "echo '\\rm'"],
)
def test_plain_or_necessarily_quoted_names_are_not_obfuscated(command: str) -> None:
    assert not parse_shell(command).commands[0].obfuscated


# --- robustness ----------------------------------------------------------------------------


def test_syntax_error_is_reported_and_readable_commands_kept() -> None:
    parsed = parse_shell('ls; echo "unterminated')
    assert parsed.error is not None
    assert parsed.error.startswith("syntax error")
    assert ("ls",) in [c.argv for c in parsed.commands]


def test_too_long_input_is_refused() -> None:
    parsed = parse_shell("x" * 200_000)
    assert parsed == parse_shell("y" * 100_001)
    assert parsed.error == "too long"


def test_nesting_is_bounded_and_reported() -> None:
    command = "echo " + "$(echo " * 50 + "x" + ")" * 50
    parsed = parse_shell(command)
    assert parsed.error is not None
    assert "nested" in parsed.error
    assert len(parsed.commands) == MAX_DEPTH + 1


@pytest.mark.parametrize(
    "command", ["eval " * 20 + "rm -rf /", "sudo " * 20 + "rm -rf /", "( " * 20 + "ls" + " )" * 20]
)
def test_deep_nesting_of_scripts_and_wrappers_is_bounded(command: str) -> None:
    parsed = parse_shell(command)
    assert parsed.error is not None
    assert "nested" in parsed.error


def test_long_and_or_chain_is_read_to_the_end() -> None:
    parsed = parse_shell("true && " * 600 + "rm -rf /")
    assert parsed.error is None
    assert parsed.commands[-1].argv == ("rm", "-rf", "/")


def test_command_count_is_bounded_and_reported() -> None:
    parsed = parse_shell("; ".join(["true"] * (MAX_COMMANDS + 10)))
    assert len(parsed.commands) == MAX_COMMANDS
    assert parsed.error == f"more than {MAX_COMMANDS} commands"


def test_pipe_from_is_bounded_and_reported() -> None:
    parsed = parse_shell(" | ".join(f"c{i}" for i in range(MAX_PIPELINE + 10)))
    assert max(len(c.pipe_from) for c in parsed.commands) == MAX_PIPELINE
    assert parsed.error is not None
    assert "pipeline" in parsed.error


def test_pipe_from_names_each_program_once() -> None:
    assert parse_shell("cat a | grep x | grep y | sh").commands[-1].pipe_from == ("cat", "grep")


@pytest.mark.parametrize(
    "command",
    [
        "",
        "   ",
        "'",
        '"',
        "$(",
        "`",
        "((((((((",
        ")))))",
        "if then fi",
        "<<EOF",
        "| | |",
        "&& ;; &&",
        "\x00\x01\x02",
        "é ☃ \udcff",
        "(" * 5000,
        "$(" * 5000,
        "{ " * 3000,
        "a" * 99_999,
        "echo 'x\n" * 2000,
        "a | " * 5000 + "b",
    ],
)
def test_garbage_never_raises(command: str) -> None:
    parsed = parse_shell(command)
    assert isinstance(parsed.commands, tuple)
