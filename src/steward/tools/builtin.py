"""The built-in toolset: file, search and shell tools, every path confined to the workspace."""

from __future__ import annotations

from steward.tools.base import FunctionToolset
from steward.tools.files import file_tools
from steward.tools.shell import shell_tools


def builtin_toolset() -> FunctionToolset:
    """read_file, write_file, edit_file, list_dir, glob, grep and bash, as one toolset."""
    return FunctionToolset([*file_tools(), *shell_tools()])
