"""The schemas the model sees for load_skill and read_rules are pinned."""

from __future__ import annotations

from steward.config import RulesSettings
from steward.rules._toolset import _make_tools


def test_the_rules_tools_schemas() -> None:
    tools = _make_tools(RulesSettings())
    assert tools["load_skill"].spec.parameters == {
        "properties": {
            "name": {"description": "The skill's name, as listed under Skills.", "type": "string"},
            "file": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "description": "A file of the skill, relative to its folder, as listed by load_skill(name).",
            },
        },
        "required": ["name"],
        "type": "object",
    }
    assert tools["read_rules"].spec.parameters == {
        "properties": {
            "topic": {
                "description": 'A few words naming the topic, e.g. "testing" or "release process".',
                "type": "string",
            }
        },
        "required": ["topic"],
        "type": "object",
    }
    assert tools["read_rules"].spec.description.startswith(
        "Read the project document that best matches a topic"
    )
