"""Tools described briefly, for the compact prompt (``prompt = "compact"``).

Every tool's description and JSON schema travel with every request; on a small model served
from a CPU that is a large share of each step's time. ``CompactToolset`` offers the wrapped
tools with the first sentence of their description and without the descriptions of their
parameters. The schemas keep every property, type, enum and ``required`` list, so what a
model may send, and how it is checked, does not change. Only what the model is offered is
shortened: ``spec_of`` (what the guard, the approvals and their pins read) gives the whole
spec as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from steward.models.base import ToolSpec
from steward.tools.base import ToolContext, Toolset, WrapperToolset

__all__ = ["CompactToolset", "compact_spec", "first_sentence", "without_descriptions"]

# Keywords that only annotate a schema: dropping them changes no value the schema accepts.
_ANNOTATIONS = frozenset({"description", "title", "examples", "$comment"})
# Keywords whose value is a mapping of names to schemas: the names are data, never keywords.
# (draft 7's "dependencies" maps a property's name to a schema or to a list of names.)
_NAMED_SCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
# Keywords whose value is data (a default, the allowed values, OpenAPI's discriminator with its
# mapping of tags, which pydantic emits for tagged unions): copied as they are.
_DATA = frozenset({"default", "enum", "const", "required", "dependentRequired", "discriminator"})

# The end of a sentence: . ! or ? then a space or the end, not right after a common abbreviation.
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)[.!?](?=\s|$)")


def first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph, on one line (all of it if it has no end)."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    found = _SENTENCE_END.search(paragraph)
    return paragraph[: found.end()] if found else paragraph


def without_descriptions(schema: Any) -> Any:
    """``schema`` without its annotations (descriptions, titles, examples), at every depth.

    A property called ``description`` stays: the names under ``properties`` are data.
    """
    if isinstance(schema, list):
        return [without_descriptions(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key in _DATA:
            out[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, Mapping):
            out[key] = {name: without_descriptions(sub) for name, sub in value.items()}
        else:
            out[key] = without_descriptions(value)
    return out


def compact_spec(spec: ToolSpec) -> ToolSpec:
    """``spec`` as the compact prompt offers it (name, origin, policy default and fingerprint kept)."""
    return replace(
        spec, description=first_sentence(spec.description), parameters=without_descriptions(spec.parameters)
    )


class CompactToolset(WrapperToolset):
    """Offers the wrapped tools with short descriptions and bare parameter schemas."""

    def __init__(self, wrapped: Toolset) -> None:
        super().__init__(wrapped)
        # The compact spec made for each spec offered last time, keyed by the original's identity
        # (kept with it, so a reused id is never mistaken): the request builder measures schemas
        # once per spec object, so the same tools must come back as the same objects.
        self._made: dict[int, tuple[ToolSpec, ToolSpec]] = {}

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        specs = await self.wrapped.get_tools(ctx)
        made: dict[int, tuple[ToolSpec, ToolSpec]] = {}
        for spec in specs:
            known = self._made.get(id(spec))
            made[id(spec)] = known if known is not None and known[0] is spec else (spec, compact_spec(spec))
        self._made = made  # only the tools offered now: bounded by the toolset's size
        return [made[id(spec)][1] for spec in specs]
