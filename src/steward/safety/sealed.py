"""Files that a program on the host runs or loads later, known by what they are, wherever they are.

The agent may change the project; it may not plant code that runs on the host, outside the
sandbox, without the user's review. These files are *sealed*: read-only while a command runs
(``steward.safety.protected`` hands them to the sandbox), undone and reported after a call
(``steward.safety.checkpoints.sealed_files``), and asked about before a file tool writes one
(the guard flags the write; in autonomous mode nobody is there to review it, so it is refused).

What a file is decides, not where it is:

* **Python environments** — a directory ``lib/pythonX.Y/site-packages`` (or ``dist-packages``)
  anywhere, made before or during the run, whatever the environment's folder is called: its
  ``*.pth`` files, ``sitecustomize.py`` and ``usercustomize.py`` (in any form Python imports:
  byte code, extension module, package) run at every ``python`` start; a ``pyvenv.cfg`` decides
  which Python an environment runs, and its ``bin/python*`` and ``bin/activate*`` are what the
  user's shell runs. The directories a ``.pth`` file puts on ``sys.path`` (an editable
  install's ``src/``) hold start-up modules as well, and a module a ``.pth`` file imports
  (``__editable___*_finder.py``, ``_distutils_hack``) runs at start-up too.
* **Git hooks wherever git looks for them** — the ``core.hooksPath`` directory of each
  repository, and for husky (a hooks path named ``_``, whose hooks source the scripts beside
  it) the directory above it (``.husky/*``); also the programs and included config files a
  repository's configuration names (``steward.safety.protected.git_run_paths``).
* **Editor and tool files that run commands** — ``.vscode/tasks.json`` and
  ``.vscode/settings.json``, ``.idea/workspace.xml`` (run configurations) at any depth outside
  installed packages (``node_modules``), and ``.envrc`` (direnv) at any depth.
* **A home directory in the workspace** — every dotfile and dot-folder of it (shell start-up
  files, ``.gitconfig``, ``.config``, ``.local``), read-only while a command runs, and Steward's
  own user configuration. After a call, new dot entries are removed; after a call made without
  the sandbox, changed top-level dotfiles and the folders of ``HOME_WALKED`` are put back too.

This module only classifies (by name, and for ``.pth`` files by a bounded read); it changes
nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

SITE_DIR_NAMES = frozenset({"site-packages", "dist-packages"})
STARTUP_MODULES = frozenset({"sitecustomize.py", "usercustomize.py"})
STARTUP_NAMES = frozenset({"sitecustomize", "usercustomize"})
"""The modules ``site`` imports at start-up: in any form Python imports (source, byte code, an
extension module, a package), they are sealed."""
EDITOR_FILES = {
    ".vscode": frozenset({"tasks.json", "settings.json"}),
    ".idea": frozenset({"workspace.xml"}),
}
ANYWHERE = frozenset({".envrc", "pyvenv.cfg"})
ENV_SCRIPTS = frozenset(
    {
        "activate",
        "activate.csh",
        "activate.fish",
        "activate.nu",
        "activate.ps1",
        "Activate.ps1",
        "activate_this.py",
    }
)
"""What a shell sources (or Python runs) to enter an environment, in its ``bin`` folder."""
_ENV_PYTHON = re.compile(r"(?:python|pypy)(?:\d+(?:\.\d+)?t?)?")
"""An environment's own interpreters in its ``bin`` folder (what ``python`` is once it is activated)."""
DEPENDENCIES = "node_modules"
"""Editor files of installed packages are not an editor's to run (nobody opens those folders),
and sealing them would stop a command from reinstalling the packages."""
HOME_PLACEHOLDER_DIRS = (".config", ".local")
"""Dot-folders of a home that get an empty read-only placeholder while a command runs, when missing."""
HOME_PLACEHOLDER_FILES = (".gitconfig", ".bash_aliases", ".pythonrc.py", ".inputrc")
HOME_WALKED = (".local/bin", ".config/autostart", ".config/systemd", ".config/environment.d", ".config/git")
"""Folders of a home whose files run (or decide what runs) at login, on ``PATH`` or in git, compared
file by file after a call made without the sandbox (every other dot entry by itself). Not all of
``.config``: programs of the user's keep live state there (a browser's profile), which a restore
would corrupt."""
NOT_HOME_DOTS = frozenset({".git", ".steward"})
"""Dot entries of a home protected by their own rules (repository metadata, Steward's state)."""

_PYTHON_DIR = re.compile(r"(?:python|pypy)\d+(?:\.\d+)?t?")
_IMPORTED = re.compile(
    r"(?:\bimport\s+|\bfrom\s+|,\s*|__import__\(\s*['\"]|import_module\(\s*['\"])([A-Za-z_][\w.]*)"
)
"""Modules an ``import`` line of a ``.pth`` file names: ``import a, b``, ``from a import``,
``__import__('a')`` and ``importlib.import_module('a')`` (setuptools' ``distutils-precedence.pth``)."""
_PTH_CAP = 64 * 1024
_PTH_LINES = 1000

PYTHON_REASON = (
    "Python runs it at start-up in that environment (a .pth file, sitecustomize or usercustomize), "
    "on the host, outside the sandbox"
)
ENV_CONFIG_REASON = "pyvenv.cfg decides which Python and standard library an environment runs on the host"
ENV_SCRIPT_REASON = (
    "it is an environment's interpreter or activation script: the user's shell runs it on the host"
)
EDITOR_REASON = "an editor runs the commands it names on the host when the folder is opened"
ENVRC_REASON = "direnv runs it in the user's shell on the host when they enter the folder"
HOOK_SCRIPT_REASON = "git hooks (core.hooksPath) run it on the host whenever git is used in that repository"
HOME_REASON = (
    "it is a dotfile or dot-folder of the home directory: shells, git, editors and programs on the host "
    "read it"
)
USER_CONFIG_REASON = (
    "it is Steward's own user configuration (sandbox and policy for every workspace); only the user "
    "changes it"
)


def is_site_dir(parts: tuple[str, ...]) -> bool:
    """Whether a directory (its path's parts) is a Python environment's site directory."""
    if len(parts) < 2 or parts[-1] not in SITE_DIR_NAMES:
        return False
    if parts[-2] == "Lib":  # the Windows layout, in a workspace shared with such a machine
        return True
    return len(parts) >= 3 and _PYTHON_DIR.fullmatch(parts[-2]) is not None and parts[-3] in ("lib", "lib64")


def sealed_in_dir(
    parts: tuple[str, ...], names: Iterable[str], subdirs: Iterable[str] = ()
) -> tuple[str, ...]:
    """The entries of one directory (its path's parts, workspace-relative) sealed by name alone.

    ``subdirs``: which entries are real directories. A *symlink* where an environment's site
    directory (or its ``pythonX.Y``) belongs is sealed itself: the walk does not follow links, and
    Python would read the start-up files behind it."""
    site = is_site_dir(parts)
    # Byte code Python would load for a start-up module: ``__pycache__`` of a site directory.
    cache = len(parts) >= 2 and parts[-1] == "__pycache__" and is_site_dir(parts[:-1])
    names = list(names)
    env_bin = bool(parts) and parts[-1] == "bin" and "activate" in names
    editor = EDITOR_FILES.get(parts[-1], frozenset()) if parts and DEPENDENCIES not in parts else frozenset()
    real = set(subdirs)
    linked: frozenset[str] | re.Pattern[str] = frozenset()
    if len(parts) >= 2 and _PYTHON_DIR.fullmatch(parts[-1]) and parts[-2] in ("lib", "lib64"):
        linked = SITE_DIR_NAMES
    elif parts and parts[-1] in ("lib", "lib64"):
        linked = _PYTHON_DIR
    return tuple(
        sorted(
            name
            for name in names
            if name in ANYWHERE
            or name in editor
            or (site and name.endswith(".pth"))
            or ((site or cache) and name.split(".", 1)[0] in STARTUP_NAMES)
            or (name not in real and _named(linked, name))
            or (env_bin and (name in ENV_SCRIPTS or _ENV_PYTHON.fullmatch(name) is not None))
        )
    )


def new_is_fine(path: str) -> bool:
    """Sealed once it exists, but an agent may make it: what makes a new environment one (its
    ``pyvenv.cfg``, and the interpreters and activation scripts of its ``bin``). Its start-up
    files stay sealed."""
    folder, _, name = path.rpartition("/")
    environment_file = name in ENV_SCRIPTS or _ENV_PYTHON.fullmatch(name) is not None
    return name == "pyvenv.cfg" or (folder.rpartition("/")[2] == "bin" and environment_file)


def _named(linked: frozenset[str] | re.Pattern[str], name: str) -> bool:
    return name in linked if isinstance(linked, frozenset) else linked.fullmatch(name) is not None


_BY_NAME = {".envrc": ENVRC_REASON, "pyvenv.cfg": ENV_CONFIG_REASON}


def reason_by_name(parts: tuple[str, ...]) -> str | None:
    """Why a workspace-relative path is sealed, from its names alone (None: it is not).

    Used for the file tools, before anything is written: it holds whether or not the file or its
    environment exists yet."""
    if not parts:
        return None
    name = parts[-1]
    reason = _BY_NAME.get(name)
    startup = any(p.split(".", 1)[0] in STARTUP_NAMES for p in parts[-2:])  # a module or its package
    if reason is None and (startup or (name.endswith(".pth") and is_site_dir(parts[:-1]))):
        reason = PYTHON_REASON
    editor = len(parts) >= 2 and name in EDITOR_FILES.get(parts[-2], ()) and DEPENDENCIES not in parts
    if reason is None and editor:
        reason = EDITOR_REASON
    in_bin = len(parts) >= 2 and parts[-2] == "bin"
    if reason is None and in_bin and (name in ENV_SCRIPTS or _ENV_PYTHON.fullmatch(name) is not None):
        reason = ENV_SCRIPT_REASON
    if reason is None and ".husky" in parts[:-1]:
        reason = HOOK_SCRIPT_REASON
    return reason


# --- what .pth files add ----------------------------------------------------------------------


def pth_effects(site: Path, text: str) -> tuple[list[Path], list[str]]:
    """What one ``.pth`` file of ``site`` does at start-up: the directories it puts on ``sys.path``
    and the modules it imports (``import x`` lines run as code)."""
    directories: list[Path] = []
    modules: list[str] = []
    for raw in text.splitlines()[:_PTH_LINES]:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("import ", "import\t")):
            modules.extend(dict.fromkeys(m.split(".")[0] for m in _IMPORTED.findall(line)))
            continue
        directories.append(Path(os.path.normpath(site / line)))
    return directories, modules


def read_head(path: Path, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of the regular file ``path``, its last component not followed;
    None for anything else (a FIFO or a device is never read) or when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def read_pth(path: Path) -> str:
    """A ``.pth`` file's text, bounded, never following a symlink out (best effort: '' if unreadable)."""
    data = read_head(path, _PTH_CAP)
    return "" if data is None else data.decode("utf-8", "replace")


def startup_paths(root: Path, pth_files: Iterable[str]) -> dict[str, str]:
    """Workspace-relative paths that the ``.pth`` files (workspace-relative) make run at start-up:
    start-up modules in the directories they add, and the modules they import."""
    found: dict[str, str] = {}
    for relative in pth_files:
        site = root / PurePosixPath(relative).parent
        directories, modules = pth_effects(site, read_pth(root / relative))
        version = next((p for p in reversed(site.parts) if _PYTHON_DIR.fullmatch(p)), "")
        places = [(d, m) for d in directories[:200] if d != site for m in sorted(STARTUP_NAMES)]
        places += [(site, m) for m in modules[:50]]
        for directory, module in places:
            for candidate in module_files(directory, module, version):
                if candidate.is_relative_to(root):
                    found[candidate.relative_to(root).as_posix()] = PYTHON_REASON
    return found


def module_files(directory: Path, module: str, python: str = "") -> list[Path]:
    """Every file by which ``import module`` finds it in ``directory`` (Python's path finder: an
    extension module, source, a package, sourceless byte code, the cached byte code of a source).

    ``python``: the environment's ``pythonX.Y`` folder name (its cache tag), else this Python's."""
    import importlib.machinery
    import sys

    digits = re.sub(r"\D", "", python)
    tag = sys.implementation.cache_tag
    if digits:
        tag = f"pypy{digits}" if python.startswith("pypy") else f"cpython-{digits}"
    names = [f"{module}{suffix}" for suffix in (*importlib.machinery.EXTENSION_SUFFIXES, ".so", ".abi3.so")]
    names += [f"{module}.py", f"{module}.pyc", f"{module}/__init__.py"]
    names += [f"__pycache__/{module}.{tag}{opt}.pyc" for opt in ("", ".opt-1", ".opt-2")]
    return [directory / name for name in dict.fromkeys(names)]


# --- homes ------------------------------------------------------------------------------------


def homes_within(root: Path) -> list[Path]:
    """The home directories that are ``root`` or lie inside it."""
    root = root.resolve(strict=False)
    found: set[Path] = set()
    home = Path.home().resolve(strict=False)
    if home == root or home.is_relative_to(root):
        found.add(home)
    if root == Path("/root") or root.parent == Path("/home"):
        found.add(root)
    if root == Path("/home"):
        with contextlib.suppress(OSError):
            found.update(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    return sorted(found)


def home_dot_entries(home: Path) -> list[str]:
    """The names of a home's dot entries that are sealed (all but repository metadata and state)."""
    try:
        with os.scandir(home) as listing:
            names = [e.name for e in listing if e.name.startswith(".")]
    except OSError:
        return []
    return sorted(n for n in names if n not in NOT_HOME_DOTS)


def user_config_dir() -> Path:
    """Where Steward's user configuration lives (``steward.config.user_config_path``'s folder)."""
    from steward.config import user_config_path

    return user_config_path().parent


# --- for steward doctor -----------------------------------------------------------------------

CLASSES = (
    "Python environments' .pth files and start-up modules (in every form, editable installs' source "
    "folders too), pyvenv.cfg, bin/python* and bin/activate*, whatever the environment's folder",
    "git hooks folders (core.hooksPath, husky's .husky/*)",
    ".vscode/tasks.json and settings.json, .idea/workspace.xml, .envrc at any depth",
    "a home directory's dotfiles and dot-folders, and Steward's user configuration",
)
"""What is sealed, in a sentence each (``steward doctor`` lists them)."""


def found_here(root: Path, sealed: Iterable[str], sites: Iterable[str]) -> str:
    """What of it this workspace holds now, in a few words (from a scan's ``sealed``/``sites``)."""
    files = list(sealed)
    environments = len(list(sites))
    editors = sum(1 for p in files if reason_by_name(tuple(p.split("/"))) in (EDITOR_REASON, ENVRC_REASON))
    homes = [str(h) for h in homes_within(root)]
    parts = [
        f"{environments} Python environment{'s' if environments != 1 else ''}",
        f"{editors} editor or direnv file{'s' if editors != 1 else ''}",
    ]
    if homes:
        parts.append(f"the home directory {', '.join(homes)}")
    return ", ".join(parts)
