"""Python environments in the workspace are sealed by what they are, whatever their folder's name.

Each attack is a real sandboxed bash call with the checkpoint before and the comparison after, as
an agent makes it; then the user's next ``python`` of that environment runs on the host, and
whether the planted code ran is read off the disk.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings

from .conftest import RunBash

PYTHON = shutil.which("python3")
pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
    pytest.mark.skipif(PYTHON is None, reason="needs python3 on PATH"),
]


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return BubblewrapSandbox(SandboxSettings(cpu_s=20, max_processes=64, tmpfs_mb=64))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """Where planted code would leave its mark when it runs on the host."""
    return tmp_path / "planted-code-ran"


def make_env(where: Path) -> Path:
    """A real environment (``python3 -m venv``); returns its site directory."""
    assert PYTHON is not None
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(where)], check=True)
    (site,) = where.glob("lib/python3*/site-packages")
    return site


def start_python(env: Path) -> None:
    """The user's next ``python`` in that environment, on the host."""
    subprocess.run([str(env / "bin" / "python"), "-c", "pass"], check=False, timeout=60)


def payload(marker: Path) -> str:
    return f"import os; open({str(marker)!r}, 'w').write('ran')"


async def test_a_pth_file_or_startup_module_planted_in_an_environment_never_runs(
    sandbox: BubblewrapSandbox, workspace: Path, marker: Path, checkpointed_bash: RunBash
) -> None:
    site = make_env(workspace / "tools-env")  # not called .venv: found by what it is
    (site / "user-owned.pth").write_text("# the user's own\n")
    site_rel = site.relative_to(workspace).as_posix()
    (workspace / "payload.txt").write_text(payload(marker) + "\n")
    attacks = [
        f'echo "{payload(marker)}" > {site_rel}/evil.pth',
        f"cp payload.txt {site_rel}/zz-copied.pth",
        f"cd {site_rel} && ln -s ../../../../payload.txt linked.pth",
        f"python3 -c \"open('{site_rel}/aa.pth', 'w').write(open('payload.txt').read())\"",
        f"cat payload.txt >> {site_rel}/user-owned.pth",
        f"cp payload.txt {site_rel}/sitecustomize.py",
        f"mv payload.txt {site_rel}/usercustomize.py",
        "echo 'include-system-site-packages = true' >> tools-env/pyvenv.cfg",
    ]
    for attack in attacks:
        await checkpointed_bash(sandbox, workspace, attack)
    start_python(workspace / "tools-env")
    assert not marker.exists()
    assert sorted(p.name for p in site.iterdir()) == ["user-owned.pth"]
    assert (site / "user-owned.pth").read_text() == "# the user's own\n"
    assert "include-system-site-packages = false" in (workspace / "tools-env" / "pyvenv.cfg").read_text()


async def test_an_environment_made_during_the_run_gets_no_startup_code(
    sandbox: BubblewrapSandbox, workspace: Path, marker: Path, checkpointed_bash: RunBash
) -> None:
    result = await checkpointed_bash(
        sandbox,
        workspace,
        "python3 -m venv --without-pip made-now && site=$(echo made-now/lib/python3*/site-packages) && "
        f'echo "{payload(marker)}" > $site/evil.pth && echo "{payload(marker)}" > $site/sitecustomize.py',
    )
    assert "evil.pth removed" in result.content
    start_python(workspace / "made-now")
    assert not marker.exists()
    (site,) = (workspace / "made-now").glob("lib/python3*/site-packages")
    assert not (site / "evil.pth").exists() and not (site / "sitecustomize.py").exists()
    assert (workspace / "made-now" / "pyvenv.cfg").exists()  # the environment itself is the agent's


@pytest.mark.parametrize("linked", ["site-packages", "python3*"])
async def test_a_site_folder_swapped_for_a_link_brings_no_startup_code(
    sandbox: BubblewrapSandbox, workspace: Path, marker: Path, checkpointed_bash: RunBash, linked: str
) -> None:
    (workspace / "elsewhere").mkdir()
    (workspace / "elsewhere" / "evil.pth").write_text(payload(marker) + "\n")
    if linked == "site-packages":  # lib/python3.X/site-packages -> a folder holding a .pth
        swap = "cd e2/lib/python3* && rm -rf site-packages && ln -s ../../../elsewhere site-packages"
    else:  # lib/python3.X -> a folder whose site-packages holds it
        swap = (
            "mkdir -p py/site-packages && cp elsewhere/evil.pth py/site-packages/ && "
            "cd e2/lib && v=$(ls) && rm -rf $v && ln -s ../../py $v"
        )
    await checkpointed_bash(sandbox, workspace, f"python3 -m venv --without-pip e2 && ({swap})")
    start_python(workspace / "e2")
    assert not marker.exists()


async def test_the_source_folder_of_an_editable_install_gets_no_startup_module(
    sandbox: BubblewrapSandbox, workspace: Path, marker: Path, checkpointed_bash: RunBash
) -> None:
    site = make_env(workspace / ".venv")
    (workspace / "src" / "proj").mkdir(parents=True)
    (workspace / "src" / "proj" / "__init__.py").write_text("")
    (site / "__editable__.proj-0.1.pth").write_text(f"{workspace / 'src'}\n")
    (site / "__editable___other_finder.py").write_text("def install():\n    pass\n")
    (site / "__editable__.other-0.1.pth").write_text(
        "import __editable___other_finder; __editable___other_finder.install()\n"
    )
    for attack in (
        f'echo "{payload(marker)}" > src/sitecustomize.py',
        f"printf '%s\\n' \"{payload(marker)}\" > src/usercustomize.py",
        f'echo "{payload(marker)}" >> {site.relative_to(workspace)}/__editable___other_finder.py',
    ):
        await checkpointed_bash(sandbox, workspace, attack)
    start_python(workspace / ".venv")
    assert not marker.exists()
    assert not (workspace / "src" / "sitecustomize.py").exists()
    assert not (workspace / "src" / "usercustomize.py").exists()
    assert (site / "__editable___other_finder.py").read_text() == "def install():\n    pass\n"


async def test_the_rest_of_an_environment_and_the_project_stay_writable(
    sandbox: BubblewrapSandbox, workspace: Path, checkpointed_bash: RunBash
) -> None:
    site = make_env(workspace / "env")
    result = await checkpointed_bash(
        sandbox,
        workspace,
        f"mkdir {site.relative_to(workspace)}/pkg && echo x=1 > {site.relative_to(workspace)}/pkg/__init__.py && echo ok > notes.txt",
    )
    assert not result.is_error, result.content
    assert (site / "pkg" / "__init__.py").read_text() == "x=1\n"
    assert (workspace / "notes.txt").read_text() == "ok\n"


async def test_without_the_sandbox_the_comparison_still_undoes_them(
    workspace: Path, marker: Path, checkpointed_bash: RunBash
) -> None:
    site = make_env(workspace / "env")
    (site / "kept.pth").write_text("# kept\n")
    site_rel = site.relative_to(workspace).as_posix()
    await checkpointed_bash(
        None,
        workspace,
        f'echo "{payload(marker)}" > {site_rel}/evil.pth; echo "{payload(marker)}" > {site_rel}/kept.pth; '
        f'echo "{payload(marker)}" > {site_rel}/sitecustomize.py',
    )
    start_python(workspace / "env")
    assert not marker.exists()
    assert (
        site / "kept.pth"
    ).read_text() == "# kept\n"  # restored from the copy: .venv-like folders are ignored
    assert not (site / "evil.pth").exists() and not (site / "sitecustomize.py").exists()


COMPILE = (
    'python3 -c "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], '
    'invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)"'
)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
async def test_a_startup_module_in_any_form_python_imports_never_runs(
    sandbox: BubblewrapSandbox, workspace: Path, marker: Path, checkpointed_bash: RunBash, sandboxed: bool
) -> None:
    site = make_env(workspace / "env")
    (site / "sitecustomize.py").write_text("# the user's own\n")
    (site / "_helper.py").write_text("def start():\n    pass\n")
    (site / "helper.pth").write_text("import _helper; _helper.start()\n")
    (workspace / "payload.py").write_text(payload(marker) + "\n")
    rel = site.relative_to(workspace).as_posix()
    tag = "cpython-" + site.parent.name.removeprefix("python").replace(".", "")
    attacks = [
        # The byte code Python would load in place of the user's own source (not checked against it).
        f"mkdir -p {rel}/__pycache__ && {COMPILE} payload.py {rel}/__pycache__/sitecustomize.{tag}.pyc",
        f"mkdir -p {rel}/__pycache__ && {COMPILE} payload.py {rel}/__pycache__/_helper.{tag}.pyc",
        # A module a .pth file imports, as an extension-module name that would be found first.
        f"cp payload.py {rel}/_helper.abi3.so",
    ]
    for attack in attacks:
        await checkpointed_bash(sandbox if sandboxed else None, workspace, attack)
    start_python(workspace / "env")
    assert not marker.exists()
    assert (site / "sitecustomize.py").read_text() == "# the user's own\n"


@pytest.mark.parametrize("form", ["package", "sourceless"])
async def test_sitecustomize_as_a_package_or_byte_code_never_runs(
    sandbox: BubblewrapSandbox, workspace: Path, marker: Path, checkpointed_bash: RunBash, form: str
) -> None:
    site = make_env(workspace / "env")
    (workspace / "payload.py").write_text(payload(marker) + "\n")
    rel = site.relative_to(workspace).as_posix()
    if form == "package":
        attack = f"mkdir {rel}/sitecustomize && cp payload.py {rel}/sitecustomize/__init__.py"
    else:
        attack = f"{COMPILE} payload.py {rel}/sitecustomize.pyc"
    await checkpointed_bash(sandbox, workspace, attack)
    start_python(workspace / "env")
    assert not marker.exists()


DISTUTILS_PTH = (
    "import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; "
    "enabled and __import__('_distutils_hack').add_shim(); \n"
)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
async def test_a_package_a_pth_file_imports_by_name_takes_no_planted_code(
    sandbox: BubblewrapSandbox, workspace: Path, marker: Path, checkpointed_bash: RunBash, sandboxed: bool
) -> None:
    site = make_env(workspace / "env")
    (site / "_distutils_hack").mkdir()
    (site / "_distutils_hack" / "__init__.py").write_text("def add_shim():\n    pass\n")
    (site / "distutils-precedence.pth").write_text(DISTUTILS_PTH)  # as setuptools installs it
    rel = site.relative_to(workspace).as_posix()
    await checkpointed_bash(
        sandbox if sandboxed else None,
        workspace,
        f'echo "{payload(marker)}" >> {rel}/_distutils_hack/__init__.py',
    )
    start_python(workspace / "env")
    assert not marker.exists()
    assert (site / "_distutils_hack" / "__init__.py").read_text() == "def add_shim():\n    pass\n"


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
async def test_an_environments_interpreter_and_activation_script_are_not_replaced(
    sandbox: BubblewrapSandbox, workspace: Path, marker: Path, checkpointed_bash: RunBash, sandboxed: bool
) -> None:
    make_env(workspace / "env")
    activate = (workspace / "env" / "bin" / "activate").read_text()
    (workspace / "evil.sh").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (workspace / "evil.sh").chmod(0o755)
    for attack in (
        "ln -sf ../../evil.sh env/bin/python",
        "rm env/bin/python3 && cp evil.sh env/bin/python3",
        f"echo 'touch {marker}' >> env/bin/activate",
    ):
        await checkpointed_bash(sandbox if sandboxed else None, workspace, attack)
    for python in ("python", "python3"):
        subprocess.run([str(workspace / "env" / "bin" / python), "-c", "pass"], check=False, timeout=60)
    subprocess.run(
        ["bash", "-c", f"source {workspace / 'env' / 'bin' / 'activate'}"], check=False, timeout=60
    )
    assert not marker.exists()
    assert (workspace / "env" / "bin" / "activate").read_text() == activate
