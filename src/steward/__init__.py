"""Steward: a self-hosted runtime for autonomous, tool-using LLM agents.

from steward import Agent, tool

@tool
def lookup_order(order_id: str) -> str:
    \"\"\"Return the status of an order.\"\"\"
    ...

agent = Agent(model="openai:gpt-4o-mini", tools=[lookup_order])
result = agent.run_sync("Where is order 42?", workspace=".")
"""

from steward.agent import Agent, Run, RunResult, RunStream
from steward.config import Config, Limits, load_config
from steward.errors import ConfigError, ModelError, RunError, ScriptError, StewardError, ToolError
from steward.events import Event, decode_event, encode_event
from steward.models.base import Model, ModelRequest, ModelResponse, Usage
from steward.models.scripted import FunctionModel, ScriptedModel
from steward.tools.base import (
    CombinedToolset,
    FilteredToolset,
    FunctionToolset,
    PrefixedToolset,
    Tool,
    ToolContext,
    ToolResult,
    Toolset,
    WrapperToolset,
    tool,
)
from steward.working_memory import WorkingMemory

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "CombinedToolset",
    "Config",
    "ConfigError",
    "Event",
    "FilteredToolset",
    "FunctionModel",
    "FunctionToolset",
    "Limits",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "PrefixedToolset",
    "Run",
    "RunError",
    "RunResult",
    "RunStream",
    "ScriptError",
    "ScriptedModel",
    "StewardError",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "Toolset",
    "Usage",
    "WorkingMemory",
    "WrapperToolset",
    "decode_event",
    "encode_event",
    "load_config",
    "tool",
]
