"""The secrets of one workspace under one configuration, for the tools' output and for the store.

``secret_watch`` is what a run's tools redact with: the values of the workspace's secret files
and those the configuration hands to processes. ``StoreRedaction`` gives the store the same for
any run it records, from the run's workspace alone: every event is redacted before it is
written, whoever writes it (a run, ``steward rewind``, a cancelled job's closing event).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from steward.safety.protected import PROJECT_CONFIG
from steward.safety.secrets.configured import configured_secrets
from steward.safety.secrets.values import SecretWatch

if TYPE_CHECKING:
    from steward.config import Config

MAX_WATCHES = 64
"""Workspaces whose watch the store keeps (a server records runs of many); the oldest goes."""


def secret_watch(workspace: Path, config: Config) -> SecretWatch:
    """The watch of ``workspace``'s secret files, with the values ``config`` hands to processes."""
    from steward.safety.checkpoints.scan import scanner_for

    scanner = scanner_for(workspace, tuple(config.sandbox.secret_files))
    # The list of secret files is looked at again at most once a second (a complete scan);
    # the files found are checked for changes on every use.
    return SecretWatch(
        lambda: [scanner.root / p for p in scanner.scan().secrets],
        rescan_s=1.0,
        extra=configured_secrets(config, os.environ),
    )


class StoreRedaction:
    """For the store: a run's workspace -> what redacts text written for that run.

    The workspace's configuration is read as a run there would read it (its ``steward.toml``,
    the user's file, the environment); one that cannot be read leaves the secret files' values,
    which need no configuration beyond the default patterns. A run with no workspace gets the
    values of the configuration outside any workspace."""

    def __init__(self) -> None:
        self._watches: OrderedDict[str, tuple[tuple[object, ...], SecretWatch]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, workspace: str) -> Callable[[str], str]:
        """Called off the event loop: it may list the workspace and read its secret files."""
        # A long-lived process (a server) records runs while the user edits the configuration:
        # a value added to an MCP server's env later is a secret from then on.
        signature = _config_signature(workspace)
        with self._lock:
            kept = self._watches.get(workspace)
            if kept is not None and kept[0] == signature:
                self._watches.move_to_end(workspace)
                return kept[1].redactor().redact
        watch = _watch_of(workspace)
        with self._lock:
            self._watches[workspace] = (signature, watch)
            self._watches.move_to_end(workspace)
            if len(self._watches) > MAX_WATCHES:
                self._watches.popitem(last=False)
        return watch.redactor().redact


def _config_signature(workspace: str) -> tuple[object, ...]:
    """What the configuration files a run in ``workspace`` reads look like on disk (a stat each)."""
    from steward.config import user_config_path

    files = [user_config_path()]
    if workspace:
        files.append(Path(workspace) / PROJECT_CONFIG)
    if named := os.environ.get("STEWARD_CONFIG"):
        files.append(Path(named))
    signature: list[object] = []
    for path in files:
        try:
            info = path.stat()
        except OSError:
            signature.append(None)
        else:
            signature.append((info.st_ino, info.st_mtime_ns, info.st_size))
    return tuple(signature)


def _watch_of(workspace: str) -> SecretWatch:
    from steward.config import Config, load_config
    from steward.errors import ConfigError

    root = Path(workspace) if workspace else None
    try:
        config = load_config(root)
    except (ConfigError, OSError, ValueError):
        config = Config()  # a broken file: its values are unknown, the secret files' are not
    if root is None or not root.is_dir():
        return SecretWatch(list, extra=configured_secrets(config, os.environ))
    return secret_watch(root, config)
