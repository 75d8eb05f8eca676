"""The built-in toolset: file, search, shell and web tools, every path confined to the workspace."""

from __future__ import annotations

from collections.abc import Sequence

from steward.models.base import ToolSpec
from steward.tools.base import FunctionToolset, ToolContext
from steward.tools.files import file_tools
from steward.tools.shell import shell_tools
from steward.tools.web import web_tools

NEEDS_DOMAINS = frozenset({"fetch_url"})
"""Tools offered only once ``[sandbox] allowed_domains`` names somewhere they may go."""


class BuiltinToolset(FunctionToolset):
    """The built-in tools; ``fetch_url`` only when there is a domain it may fetch from (without
    one it could only fail, and its schema would cost tokens on every request)."""

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        tools = await super().get_tools(ctx)
        if ctx.settings.allowed_domains:
            return tools
        return [spec for spec in tools if spec.name not in NEEDS_DOMAINS]


def builtin_toolset() -> FunctionToolset:
    """read_file, write_file, edit_file, list_dir, glob, grep, bash and fetch_url, as one toolset."""
    return BuiltinToolset([*file_tools(), *shell_tools(), *web_tools()])
