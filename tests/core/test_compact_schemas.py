"""The compact prompt's tool schemas stay valid JSON Schema that accepts what the full ones do
(servers with strict or guided decoding, vLLM's and OpenAI's, compile them as they are)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from steward.phases import AGENT_STEP_SPEC, COMPACT_AGENT_STEP_SPEC
from steward.tools.base import ToolContext
from steward.tools.builtin import builtin_toolset
from steward.tools.compact import compact_spec, without_descriptions


def _dangling(schema: Any, where: str = "$") -> list[str]:
    """``required`` names that no ``properties`` beside them define, at any depth."""
    found: list[str] = []
    if isinstance(schema, dict):
        required, properties = schema.get("required"), schema.get("properties")
        if isinstance(required, list) and isinstance(properties, dict):
            found += [f"{where}: {name}" for name in required if name not in properties]
        for key, value in schema.items():
            found += _dangling(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for n, item in enumerate(schema):
            found += _dangling(item, f"{where}[{n}]")
    return found


def test_names_that_are_data_stay_under_dependencies_and_a_discriminator() -> None:
    # Property names and union tags that happen to read like annotation keywords.
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "description": {"type": "string"}},
        "dependencies": {"description": ["title"], "title": {"required": ["description"]}},
        "discriminator": {"propertyName": "kind", "mapping": {"title": "#/$defs/Title"}},
        "$defs": {"Title": {"type": "object", "title": "Title"}},
    }
    assert without_descriptions(schema) == {
        "type": "object",
        "properties": {"title": {"type": "string"}, "description": {"type": "string"}},
        "dependencies": {"description": ["title"], "title": {"required": ["description"]}},
        "discriminator": {"propertyName": "kind", "mapping": {"title": "#/$defs/Title"}},
        "$defs": {"Title": {"type": "object"}},
    }


async def test_every_compact_tool_schema_is_valid_and_requires_only_what_it_defines(tmp_path: Path) -> None:
    specs = [*await builtin_toolset().get_tools(ToolContext(workspace=tmp_path)), AGENT_STEP_SPEC]
    for spec in [*specs, COMPACT_AGENT_STEP_SPEC]:
        schema = compact_spec(spec).parameters
        validator_for(schema, default=Draft202012Validator).check_schema(dict(schema))
        assert not _dangling(schema), spec.name
        assert str(spec.parameters).count("'enum'") == str(schema).count("'enum'"), spec.name
