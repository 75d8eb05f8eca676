"""Core memory (seed 002): labelled, size-capped text blocks in the system prompt.

The agent keeps durable facts about the user and the project here and edits them with
``memory_replace`` and ``memory_append``. Every failed edit raises ``ToolError`` with a
message that says what to do instead, and changes nothing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from html import escape

from steward.errors import ConfigError, ToolError
from steward.tools.base import FunctionToolset, Tool

DEFAULT_LIMIT_CHARS = 2000
_LABEL = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    """One labelled block: its text, its size cap and what belongs in it."""

    label: str
    value: str = ""
    limit_chars: int = DEFAULT_LIMIT_CHARS
    #: What belongs in the block; shown to the model (not stored: it comes from the definition).
    description: str = ""

    def __post_init__(self) -> None:
        if not _LABEL.match(self.label):
            raise ConfigError(
                f"memory block label {self.label!r} is not allowed; use 1-40 lower-case letters, "
                "digits, '_' or '-', starting with a letter (e.g. 'user')"
            )
        if self.limit_chars <= 0:
            raise ConfigError(
                f"memory block {self.label!r} has limit_chars={self.limit_chars}; use a positive number"
            )

    @property
    def chars(self) -> int:
        return len(self.value)


def default_blocks() -> tuple[MemoryBlock, ...]:
    """The blocks every agent starts with, empty."""
    return (
        MemoryBlock(
            "user",
            description="What you know about the user: name, role, preferences, how they like to work.",
        ),
        MemoryBlock(
            "project",
            description=(
                "Facts about this project and workspace: what it is, its layout, how to build and "
                "test it, conventions, pitfalls found."
            ),
        ),
    )


_HEADER = (
    "--- Core Memory ---\n"
    "Your durable notes, kept across sessions. Keep them true and short: add a lasting fact with "
    "memory_append(label, text); correct, condense or remove one with memory_replace(label, old, new). "
    "Only facts that stay useful in later sessions belong here; the current task's state does not."
)
_FOOTER = "--- End Core Memory ---"


class CoreMemory:
    """The core memory blocks in the order they are shown."""

    def __init__(self, blocks: Iterable[MemoryBlock] = ()) -> None:
        self._blocks: dict[str, MemoryBlock] = {}
        for block in blocks:
            if block.label in self._blocks:
                raise ConfigError(f"two memory blocks are labelled {block.label!r}; give each a unique label")
            self._blocks[block.label] = block

    @classmethod
    def default(cls) -> CoreMemory:
        return cls(default_blocks())

    @property
    def blocks(self) -> tuple[MemoryBlock, ...]:
        return tuple(self._blocks.values())

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self._blocks)

    def __iter__(self) -> Iterator[MemoryBlock]:
        return iter(self.blocks)

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, label: object) -> bool:
        return label in self._blocks

    def get(self, label: str) -> MemoryBlock:
        found = self._blocks.get(label)
        if found is None:
            labels = ", ".join(repr(name) for name in self._blocks) or "(none)"
            raise ToolError(f"There is no memory block {label!r}. The blocks are: {labels}.")
        return found

    def set(self, block: MemoryBlock) -> None:
        """Put a block in wholesale (loading from the store); a new label goes last. No checks."""
        self._blocks[block.label] = block

    def replace(self, label: str, old: str, new: str) -> MemoryBlock:
        """Replace the one exact occurrence of ``old`` in a block with ``new``; return the block."""
        block = self.get(label)
        if not old:
            raise ToolError("old is empty; to add text use memory_append, to change text quote it in old.")
        count = block.value.count(old)
        if not block.value:
            raise ToolError(f"memory block {label!r} is empty; add text with memory_append.")
        if count == 0:
            raise ToolError(
                f"old does not occur in memory block {label!r}; it must match the current text exactly "
                f"(spaces and line breaks included). The block currently reads:\n{block.value}"
            )
        if count > 1:
            raise ToolError(
                f"old occurs {count} times in memory block {label!r}; include more of the surrounding "
                "text so that it occurs exactly once."
            )
        return self._store(block, block.value.replace(old, new, 1))

    def append(self, label: str, text: str) -> MemoryBlock:
        """Add ``text`` at the end of a block, on a new line; return the block."""
        block = self.get(label)
        if not text.strip():
            raise ToolError("text is empty; give the fact to remember.")
        separator = "\n" if block.value and not block.value.endswith("\n") else ""
        return self._store(block, block.value + separator + text)

    def _store(self, block: MemoryBlock, value: str) -> MemoryBlock:
        # An edit that shrinks a block already over its cap (the cap was lowered) is let
        # through, so the block can be brought back under it in steps.
        if len(value) > block.limit_chars and len(value) >= block.chars:
            over = len(value) - block.limit_chars
            raise ToolError(
                f"memory block {block.label!r} would hold {len(value)} characters, {over} over its limit "
                f"of {block.limit_chars}; nothing was changed. Shorten the text, or first condense or "
                "remove older entries with memory_replace."
            )
        updated = replace(block, value=value)
        self._blocks[block.label] = updated
        return updated

    def render(self) -> str:
        """The core memory section of the system prompt; the same blocks always give the same text."""
        if not self._blocks:
            return ""
        parts = [_HEADER]
        for block in self._blocks.values():
            about = f' description="{escape(block.description)}"' if block.description else ""
            head = f'<memory label="{block.label}" chars="{block.chars}/{block.limit_chars}"{about}>'
            body = block.value.rstrip("\n")
            parts.append(f"{head}\n{body}\n</memory>" if body else f"{head}\n</memory>")
        parts.append(_FOOTER)
        return "\n".join(parts)


OnChange = Callable[[MemoryBlock], Awaitable[None]]


def memory_toolset(memory: CoreMemory, on_change: OnChange | None = None) -> FunctionToolset:
    """``memory_replace`` and ``memory_append`` editing ``memory``.

    ``on_change`` is awaited with the edited block after each edit (to persist it). If it
    raises, the edit is undone and the model is told it failed. Edits run one at a time, so
    blocks are saved in the order they were made.
    """
    lock = asyncio.Lock()

    async def edit(label: str, change: Callable[[], MemoryBlock]) -> str:
        async with lock:
            before = memory.get(label)
            block = change()
            if on_change is not None:
                try:
                    await on_change(block)
                except BaseException:
                    memory.set(before)
                    raise
        return (
            f"Memory block {label!r} saved ({block.chars}/{block.limit_chars} characters). "
            f"It now reads:\n{block.value}"
        )

    async def memory_replace(label: str, old: str, new: str) -> str:
        """Correct, condense or delete text in a core memory block.

        Core memory holds durable facts about the user and the project that should survive
        across sessions, not the state of the current task. Use this when a remembered fact
        changed or is wrong, or to make room in a full block.

        Args:
            label: The block to edit, e.g. "user" or "project".
            old: Text now in the block, copied exactly; it must occur exactly once.
            new: The text to put in its place; empty to delete it.
        """
        return await edit(label, lambda: memory.replace(label, old, new))

    async def memory_append(label: str, text: str) -> str:
        """Remember a new durable fact by adding it at the end of a core memory block.

        Core memory holds durable facts about the user and the project that should survive
        across sessions (preferences, conventions, how to build and test), not the state of
        the current task. Keep each entry to one short line.

        Args:
            label: The block to add to, e.g. "user" or "project".
            text: The fact to remember.
        """
        return await edit(label, lambda: memory.append(label, text))

    return FunctionToolset(
        [Tool(memory_replace, name="memory_replace"), Tool(memory_append, name="memory_append")]
    )
