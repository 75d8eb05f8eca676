"""A real repository with a real bare remote, for the forge tests; and how remotes are read.

``Repo`` makes a workspace repository whose ``origin`` has a forge URL for pull requests
(``https://github.com/acme/widgets.git``) and a local bare repository as its push URL, so
pushes really land somewhere the tests can look.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from steward.config import GitSettings
from steward.errors import ToolError
from steward.tools.forge import api_root, forge_of, parse_remote, strip_credentials

FORGE_URL = "https://github.com/acme/widgets.git"
TOKEN = "ghp_forgeTestToken0123456789abcdefABCDEF"


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip()


@dataclass
class Repo:
    workspace: Path
    remote: Path

    def commit(self, name: str, text: str, message: str) -> str:
        (self.workspace / name).write_text(text)
        git(self.workspace, "add", name)
        git(self.workspace, "commit", "-q", "-m", message)
        return git(self.workspace, "rev-parse", "HEAD")

    def remote_sha(self, branch: str) -> str | None:
        try:
            return git(self.remote, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
        except AssertionError:
            return None


def make_repo(root: Path, *, forge_url: str = FORGE_URL) -> Repo:
    remote = root / "remote.git"
    workspace = root / "ws"
    git(root, "init", "-q", "--bare", "-b", "main", str(remote))
    workspace.mkdir()
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.email", "dev@example.com")
    git(workspace, "config", "user.name", "Dev")
    repo = Repo(workspace, remote)
    repo.commit("README.md", "widgets\n", "Initial commit")
    git(workspace, "remote", "add", "origin", forge_url)
    git(workspace, "config", "remote.origin.pushurl", str(remote))
    git(workspace, "push", "-q", "origin", "main")
    return repo


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/acme/widgets.git", ("github.com", "acme", "widgets")),
        ("https://user:secret@git.example.org/team/app", ("git.example.org", "team", "app")),
        ("ssh://git@gitea.example.org:2222/team/app.git", ("gitea.example.org", "team", "app")),
        ("git@github.com:acme/widgets.git", ("github.com", "acme", "widgets")),
        ("https://host.example/gitea/team/app.git", ("host.example", "team", "app")),
    ],
)
def test_owner_and_repository_come_from_https_and_ssh_remotes(
    url: str, expected: tuple[str, str, str]
) -> None:
    found = parse_remote(url)
    assert found is not None and (found.host, found.owner, found.name) == expected


@pytest.mark.parametrize(
    "url", ["/srv/git/app.git", "file:///srv/git/app.git", "../app.git", "https://github.com/"]
)
def test_a_path_remote_is_not_a_forge_repository(url: str) -> None:
    assert parse_remote(url) is None


def test_credentials_are_stripped_from_a_remote_url_before_it_is_shown() -> None:
    assert (
        strip_credentials("https://x-access-token:ghp_abc@github.com/a/b.git") == "https://github.com/a/b.git"
    )
    assert strip_credentials("git@github.com:a/b.git") == "git@github.com:a/b.git"


def test_the_forge_and_its_api_follow_the_host_unless_configured() -> None:
    auto = GitSettings()
    assert forge_of(auto, "github.com") == "github"
    assert api_root(auto, "github", "github.com") == "https://api.github.com"
    assert forge_of(auto, "codeberg.org") == "gitea"
    assert api_root(auto, "gitea", "codeberg.org") == "https://codeberg.org/api/v1"
    enterprise = GitSettings(forge="github")
    assert api_root(enterprise, forge_of(enterprise, "git.corp"), "git.corp") == "https://git.corp/api/v3"
    with pytest.raises(ToolError, match=r'\[git\] forge = "github" or "gitea"'):
        forge_of(auto, "git.corp")
