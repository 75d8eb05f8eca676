"""Steward: a self-hosted runtime for autonomous, tool-using LLM agents.

    from steward import Agent, tool

    @tool
    def lookup_order(order_id: str) -> str:
        \"\"\"Return the status of an order.\"\"\"
        ...

    agent = Agent(model="openai:gpt-4o-mini", tools=[lookup_order])
    result = agent.run_sync("Where is order 42?", workspace=".")

Names are loaded on first use (PEP 562), so `import steward` costs almost nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE = {
    "Agent": "steward.agent",
    "CombinedToolset": "steward.tools.base",
    "Config": "steward.config",
    "ConfigError": "steward.errors",
    "Event": "steward.events",
    "FencedOut": "steward.errors",
    "FilteredToolset": "steward.tools.base",
    "FunctionModel": "steward.models.scripted",
    "FunctionToolset": "steward.tools.base",
    "Job": "steward.jobs.store",
    "JobError": "steward.jobs.store",
    "JobHandle": "steward.jobs.api",
    "Limits": "steward.config",
    "Model": "steward.models.base",
    "ModelError": "steward.errors",
    "ModelRequest": "steward.models.base",
    "ModelResponse": "steward.models.base",
    "PrefixedToolset": "steward.tools.base",
    "Queue": "steward.jobs.api",
    "Run": "steward.run",
    "RunError": "steward.errors",
    "RunResult": "steward.run",
    "RunStream": "steward.run",
    "ReplayError": "steward.errors",
    "ScriptError": "steward.errors",
    "Session": "steward.sessions",
    "StoreError": "steward.errors",
    "ScriptedModel": "steward.models.scripted",
    "StewardError": "steward.errors",
    "Tool": "steward.tools.base",
    "ToolContext": "steward.tools.base",
    "ToolError": "steward.errors",
    "ToolResult": "steward.tools.base",
    "Toolset": "steward.tools.base",
    "Usage": "steward.models.base",
    "WorkingMemory": "steward.memory.working",
    "WrapperToolset": "steward.tools.base",
    "decode_event": "steward.events",
    "encode_event": "steward.events",
    "load_config": "steward.config",
    "open_store": "steward.store.events",
    "tool": "steward.tools.base",
}

__all__ = [
    "Agent",
    "CombinedToolset",
    "Config",
    "ConfigError",
    "Event",
    "FencedOut",
    "FilteredToolset",
    "FunctionModel",
    "FunctionToolset",
    "Job",
    "JobError",
    "JobHandle",
    "Limits",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "PrefixedToolset",
    "Queue",
    "ReplayError",
    "Run",
    "RunError",
    "RunResult",
    "RunStream",
    "ScriptError",
    "ScriptedModel",
    "Session",
    "StewardError",
    "StoreError",
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
    "open_store",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'steward' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return [*globals(), *__all__]


if TYPE_CHECKING:
    from steward.agent import Agent
    from steward.config import Config, Limits, load_config
    from steward.errors import (
        ConfigError,
        FencedOut,
        ModelError,
        ReplayError,
        RunError,
        ScriptError,
        StewardError,
        StoreError,
        ToolError,
    )
    from steward.events import Event, decode_event, encode_event
    from steward.jobs.api import JobHandle, Queue
    from steward.jobs.store import Job, JobError
    from steward.memory.working import WorkingMemory
    from steward.models.base import Model, ModelRequest, ModelResponse, Usage
    from steward.models.scripted import FunctionModel, ScriptedModel
    from steward.run import Run, RunResult, RunStream
    from steward.sessions import Session
    from steward.store.events import open_store
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
