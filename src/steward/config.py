"""Typed, layered configuration.

Layers merge in a fixed order, later wins: built-in defaults < user file
(``$XDG_CONFIG_HOME/steward/config.toml``, else ``~/.config/steward/config.toml``) < project
file (``steward.toml`` at the workspace root) < the file named by ``STEWARD_CONFIG`` <
environment (``STEWARD_MODEL``) < command-line flags. A wrong key or value is a
``ConfigError`` naming the file, the key and what is allowed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from steward.errors import ConfigError
from steward.secret_paths import DEFAULT_SECRET_FILES

# Plain dataclasses keep `import steward` fast; pydantic validates them only when a
# configuration is loaded. Bounds live in field metadata and are checked the same way.


_FORBID_EXTRA: Any = {"extra": "forbid"}  # a pydantic ConfigDict, without importing pydantic


def _f(default: Any, doc: str, **bounds: float) -> Any:
    # A switch is a TOML true or false: pydantic's lax mode would read "no", "off" or 0 as false,
    # and `enabled = "no"` is a mistake to point out. ("strict" is a pydantic Field argument.)
    strict = {"strict": True} if isinstance(default, bool) else {}
    return field(default=default, metadata={"doc": doc, **strict, **bounds})


@dataclass(slots=True)
class ProviderSettings:
    __pydantic_config__ = _FORBID_EXTRA

    base_url: str | None = _f(None, "Server URL, for OpenAI-compatible servers (vLLM, llama.cpp, LM Studio).")
    api_key_env: str | None = _f(None, "Environment variable holding the API key (default: the usual one).")
    timeout_s: float = _f(
        300.0, "Seconds one model call may take in all (connecting, waiting and streaming the reply).", gt=0
    )
    max_retries: int = _f(3, "Retries with backoff on rate limits, server errors and timeouts.", ge=0, le=10)
    stream: bool | None = _f(
        None,
        "false: ask for whole replies, for servers that cannot stream tool calls (unset: stream, and "
        "fall back to whole replies by itself when the server cannot).",
        strict=True,
    )


@dataclass(slots=True)
class Limits:
    __pydantic_config__ = _FORBID_EXTRA

    max_steps: int = _f(50, "Model calls a run may make before it ends as partial or stuck.", ge=1, le=10_000)
    max_output_tokens: int = _f(
        8_192, "Most tokens one model reply may hold (sent as max_tokens with every request).", ge=16
    )
    request_token_budget: int = _f(32_000, "Most input tokens one model request may carry.", ge=2_000)
    observation_share: float = _f(
        0.2, "Share of the request budget for full tool outputs; older ones are elided.", gt=0, le=1
    )
    keep_recent_observations: int = _f(3, "The newest tool outputs always sent verbatim.", ge=1, le=50)
    repeat_warning: int = _f(3, "Identical consecutive actions before the repeated-action signal.", ge=2)
    repeat_stop: int = _f(6, "Identical consecutive actions that end the run as stuck.", ge=2)
    model_retries: int = _f(2, "Extra tries after a retryable failure inside a stream.", ge=0, le=10)
    model_retry_backoff_s: float = _f(2.0, "First wait before such a retry; doubles each time.", ge=0)
    tool_timeout_s: float = _f(600.0, "Upper bound for any one tool call, in seconds.", gt=0)
    run_timeout_s: float = _f(
        0.0, "Wall-clock seconds a run may spend running; it then ends partial (0: no limit).", ge=0
    )
    bash_timeout_s: float = _f(120.0, "Default timeout of a bash command, in seconds.", gt=0)
    output_cap_chars: int = _f(30_000, "Command output kept (head and tail) before truncation.", ge=1_000)
    read_cap_chars: int = _f(50_000, "Largest file excerpt read_file returns at once.", ge=1_000)
    compact_output_chars: int = _f(
        4_000, "Tool outputs longer than this are compacted by the model (0: never).", ge=0
    )
    compact_skip_tools: list[str] = field(
        default_factory=lambda: ["recall_output", "read_file", "load_skill", "read_rules"],
        metadata={"doc": "Tools whose outputs are never compacted (the agent needs them verbatim)."},
    )
    summarize_turns: bool = _f(True, "Summarise the oldest turns when the transcript outgrows the budget.")
    summarize_failed_attempts: bool = _f(
        True, "On a re-plan after failures, restart the transcript from a summary of the attempt."
    )
    verify: str = _f(
        "",
        'A command that checks an autonomous run\'s work when it ends with an answer, e.g. "pytest -q" '
        "(run in the sandbox; a non-zero exit asks the agent once more whether it is done).",
    )
    max_continuations: int = _f(
        2, "Times a run that ends with open sub-tasks or a failing verifier is asked to go on.", ge=0, le=20
    )


@dataclass(slots=True)
class BudgetSettings:
    """What a run may spend (0: no limit). ``tree_*``: a job and all the jobs it delegated to,
    together; ``session_*``: all the runs of one session."""

    __pydantic_config__ = _FORBID_EXTRA

    tokens: int = _f(0, "Tokens (input + output) one run may use, its delegated jobs included.", ge=0)
    cost_usd: float = _f(0.0, "US dollars one run may spend on model calls (needs the model's price).", ge=0)
    time_s: float = _f(0.0, "Seconds one run may spend running.", ge=0)
    tool_calls: int = _f(0, "Tool calls one run may make.", ge=0)
    tree_tokens: int = _f(0, "Tokens a job tree may use together.", ge=0)
    tree_cost_usd: float = _f(0.0, "US dollars a job tree may spend together.", ge=0)
    tree_time_s: float = _f(0.0, "Seconds of running a job tree may spend together.", ge=0)
    tree_tool_calls: int = _f(0, "Tool calls a job tree may make together.", ge=0)
    session_tokens: int = _f(0, "Tokens the runs of one session may use together.", ge=0)
    session_cost_usd: float = _f(0.0, "US dollars the runs of one session may spend together.", ge=0)
    session_time_s: float = _f(0.0, "Seconds of running the runs of one session may spend together.", ge=0)
    session_tool_calls: int = _f(0, "Tool calls the runs of one session may make together.", ge=0)
    warn_at: float = _f(0.8, "Share of a budget used at which the agent is told to wrap up.", gt=0, le=1)


@dataclass(slots=True)
class PriceSettings:
    """A model's price, in US dollars per million tokens (overrides the built-in table)."""

    __pydantic_config__ = _FORBID_EXTRA

    input_per_mtok: float = field(metadata={"doc": "Input (prompt) tokens.", "ge": 0})
    output_per_mtok: float = field(metadata={"doc": "Output (completion) tokens.", "ge": 0})
    cached_input_per_mtok: float | None = _f(None, "Cached input tokens (default: input's).", ge=0)
    cache_write_per_mtok: float | None = _f(None, "Input written to the cache (default: input's).", ge=0)


@dataclass(slots=True)
class MemorySettings:
    __pydantic_config__ = _FORBID_EXTRA

    enabled: bool = _f(True, "Core memory blocks the agent edits, kept in the store across sessions.")
    long_term: bool = _f(
        True, "The remember, recall and forget tools, and summaries archived as searchable memory."
    )
    embedder: str = _f(
        "",
        "What turns text into vectors for recall by meaning: \"local\" (pip install 'steward[embed]'), "
        '"openai:text-embedding-3-small", "ollama:nomic-embed-text", any "openai:MODEL" with '
        "[models.openai] base_url; empty: recall by keyword only.",
    )
    embed_batch: int = _f(64, "Texts sent to the embedder in one request.", ge=1, le=2048)
    merge_similarity: float = _f(
        0.95, "A new memory this close (cosine) to one in its scope is merged into it.", gt=0, le=1
    )
    ttl_days: float | None = _f(
        None, "Days a remembered item lives unless given its own; none: forever.", gt=0
    )
    recall_k: int = _f(5, "Items recall returns unless asked for more.", ge=1, le=100)
    rrf_k: int = _f(
        10, "Reciprocal rank fusion's constant: smaller trusts the top of each list more.", ge=1, le=1000
    )
    keyword_weight: float = _f(
        1.5,
        "The keyword list's share in the fusion, the vector list's being 1 (a strong embedder may "
        "earn 1.0; on LongMemEval-S with the local e5, 1.5 and rrf_k 10 recalled best).",
        gt=0,
        le=10,
    )
    exact_limit: int = _f(
        20_000,
        "Vectors of a scope compared one by one in a search by meaning (NumPy); above, only the "
        "groups of similar vectors nearest the query.",
        ge=100,
    )
    probe_share: float = _f(
        0.15,
        "Share of those groups a search reads: more finds more of the exact nearest, slower "
        "(0.15: 96% of the exact top 50 at 100 k).",
        gt=0,
        le=1,
    )
    pgvector_exact_items: int = _f(
        2_000, "With pgvector, a scope of at most this many items is scanned exactly, not through HNSW.", ge=0
    )
    pgvector_exact_share: float = _f(
        0.02, "With pgvector, so is a scope of at most this share of all items.", ge=0, le=1
    )
    pgvector_ef_factor: int = _f(
        2,
        "pgvector's HNSW candidates (hnsw.ef_search) per result wanted, within 40-1000: more finds "
        "more of the exact nearest, slower.",
        ge=1,
        le=20,
    )
    user: str = _f("", 'The user whose memories a run sees; empty: the job\'s user, else "local".')
    notes_chars: int = _f(
        1_500, "Characters of notes on what a run touches shown in its working-memory view.", ge=0
    )


@dataclass(slots=True)
class CacheSettings:
    __pydantic_config__ = _FORBID_EXTRA

    exact: bool = _f(False, "Reuse the reply to a request identical to one seen before.")
    similar: bool = _f(
        False, "Reuse the reply to a similar last user turn under the same static prompt (needs an embedder)."
    )
    threshold: float = _f(
        0.98,
        "Cosine similarity a similar request must reach (at 0.95, e5 confused near questions).",
        gt=0,
        le=1,
    )
    ttl_s: float = _f(86_400.0, "Seconds a cached reply stays usable.", gt=0)
    side_effects: bool = _f(
        False, "Also reuse replies that call tools with side effects (by default only read-only ones)."
    )


@dataclass(slots=True)
class GitSettings:
    __pydantic_config__ = _FORBID_EXTRA

    remote: str = _f("origin", "The remote git_push pushes to and pull requests are opened on.")
    forge: Literal["auto", "github", "gitea", "none"] = _f(
        "auto",
        "Whose API opens pull requests: github (and GitHub Enterprise), gitea (and Forgejo); auto: "
        "from the remote's host; none: no create_pull_request.",
    )
    api_url: str = _f(
        "",
        "The forge's API root: https://api.github.com (default for github.com), "
        "https://HOST/api/v3 (GitHub Enterprise), https://HOST/api/v1 (Gitea, Forgejo).",
    )
    token_env: str = _f(
        "",
        "Environment variable holding the forge token (default GITHUB_TOKEN or GITEA_TOKEN); "
        "push falls back to git's credential helper. The token never enters the sandbox.",
    )


@dataclass(slots=True)
class CodeSettings:
    __pydantic_config__ = _FORBID_EXTRA

    enabled: bool = _f(True, "Offer execute_code: Python in the sandbox that calls the run's tools.")
    max_tool_calls: int = _f(200, "Tool calls one program may make through its channel.", ge=1, le=10_000)


@dataclass(slots=True)
class PolicySettings:
    __pydantic_config__ = _FORBID_EXTRA

    mode: Literal["structured", "autonomous"] = _f(
        "structured", "structured: asks are asked; autonomous: asks are approved (guard, deny rules stay)."
    )
    write: bool = _f(True, "false turns every write tool off; bash then sees the workspace read-only.")
    allow: list[str] = field(default_factory=list, metadata={"doc": 'Rules such as "bash(git status*)".'})
    ask: list[str] = field(default_factory=list, metadata={"doc": 'Rules such as "edit_file(src/**)".'})
    deny: list[str] = field(default_factory=list, metadata={"doc": 'Rules such as "bash(rm *)".'})
    approval_timeout_s: float = _f(600.0, "Seconds an approval waits before its default applies.", gt=0)
    on_timeout: Literal["deny", "allow"] = _f("deny", "What an unanswered approval does at its deadline.")


@dataclass(slots=True)
class SandboxConfig:
    __pydantic_config__ = _FORBID_EXTRA

    enabled: bool = _f(True, "Run bash and other command tools inside bubblewrap.")
    network: bool = _f(False, "Allow the network for every command (otherwise only where the policy allows).")
    tmpfs_mb: int = _f(1024, "Size of the sandbox's private /tmp and HOME, in MiB.", ge=16)
    readable: list[str] = field(default_factory=list, metadata={"doc": "Extra paths visible read-only."})
    writable: list[str] = field(
        default_factory=list, metadata={"doc": "Extra paths writable (besides the workspace)."}
    )
    env: list[str] = field(default_factory=list, metadata={"doc": "Extra environment variables passed in."})
    cpu_s: int = _f(300, "CPU seconds per command.", ge=1)
    memory_mb: int = _f(8192, "Address space per process, in MiB (RLIMIT_AS).", ge=64)
    file_size_mb: int = _f(1024, "Largest file a command may write, in MiB.", ge=1)
    max_processes: int = _f(256, "Processes per command.", ge=8)
    allowed_domains: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "Domains a command granted the network may reach through the egress proxy "
            '(e.g. "pypi.org", "*.github.com"); empty: none.'
        },
    )
    secret_files: list[str] = field(
        default_factory=lambda: list(DEFAULT_SECRET_FILES),
        metadata={
            "doc": "File names (globs) that hold secrets: masked inside the sandbox, refused by the "
            "file tools unless a policy rule allows them, and their values redacted from tool output."
        },
    )


@dataclass(slots=True)
class CheckpointSettings:
    __pydantic_config__ = _FORBID_EXTRA

    enabled: bool = _f(True, "Record the workspace before every call that can change files.")
    ignore: list[str] = field(
        default_factory=list,
        metadata={"doc": "Extra ignore patterns (gitignore syntax) besides the workspace's .gitignore."},
    )
    max_file_mb: float = _f(
        20.0, "Untracked files larger than this are not recorded (and are reported).", gt=0
    )
    state_dir: str | None = _f(
        None,
        "Where shadow repositories live (default: $XDG_STATE_HOME/steward, else ~/.local/state/steward).",
    )


@dataclass(slots=True)
class StoreSettings:
    __pydantic_config__ = _FORBID_EXTRA

    url: str | None = _f(
        None, "sqlite:///path/file.db or postgresql://...; default: .steward/steward.db in the workspace."
    )


@dataclass(slots=True)
class ToolsSettings:
    __pydantic_config__ = _FORBID_EXTRA

    discovery: Literal["auto", "on", "off"] = _f(
        "auto",
        "auto: offer discover_tools instead of every schema when the tools would take more than "
        "discovery_share of the request budget or number more than discovery_max_tools; on; off.",
    )
    discovery_share: float = _f(
        0.2, "Share of the request budget tool schemas may take before discovery.", gt=0, le=1
    )
    discovery_max_tools: int = _f(40, "More tools than this turn discovery on (auto).", ge=1)
    always_offer: list[str] = field(
        default_factory=lambda: [
            "bash", "read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "recall_output",
            "load_skill", "find_skill", "read_rules", "memory_*", "remember", "recall", "forget",
        ],
        metadata={"doc": "Tools (glob patterns) offered even when discovery is on."},
    )  # fmt: skip


@dataclass(slots=True)
class RulesSettings:
    __pydantic_config__ = _FORBID_EXTRA

    agents_md: bool = _f(
        True, "Read AGENTS.md: the root file into the prompt, nested ones when their files are touched."
    )
    max_chars: int = _f(12_000, "Most characters of one AGENTS.md given to the model.", ge=500)
    skill_dirs: list[str] = field(
        default_factory=lambda: [".steward/skills", ".agents/skills", "~/.config/steward/skills"],
        metadata={
            "doc": "Folders searched for skills (each a folder with a SKILL.md); relative to the workspace."
        },
    )


@dataclass(slots=True)
class McpServerConfig:
    __pydantic_config__ = _FORBID_EXTRA

    command: str | None = _f(None, "stdio: the program to start (found on PATH).")
    args: list[str] = field(default_factory=list, metadata={"doc": "stdio: its arguments."})
    env: dict[str, str] = field(
        default_factory=dict,
        metadata={"doc": "stdio: variables set for it; ${NAME} takes NAME from our environment."},
    )
    env_passthrough: list[str] = field(
        default_factory=list,
        metadata={"doc": "stdio: variables of ours passed through by name (others are not)."},
    )
    cwd: str | None = _f(
        None, "stdio: its working directory, relative to the workspace (default: the workspace)."
    )
    url: str | None = _f(None, "streamable HTTP: the server's URL.")
    headers: dict[str, str] = field(
        default_factory=dict, metadata={"doc": "HTTP: headers sent with every request; ${NAME} is expanded."}
    )
    enabled: bool = _f(True, "false keeps the server configured but not started.")
    startup_timeout_s: float = _f(
        30.0, "Seconds the server may take to start and answer the handshake.", gt=0
    )
    call_timeout_s: float = _f(120.0, "Seconds one call (tool, resource, prompt) may take.", gt=0)
    tool_timeouts: dict[str, float] = field(
        default_factory=dict, metadata={"doc": "Per-tool timeouts in seconds, by the server's tool name."}
    )
    approval: Literal["ask", "read_only", "allow"] = _f(
        "ask",
        "Default for its tools when no policy rule matches: ask; read_only: run tools the server marks "
        "read-only without asking; allow: trust every tool.",
    )
    include_tools: list[str] = field(
        default_factory=list, metadata={"doc": "Offer only these tools (globs)."}
    )
    exclude_tools: list[str] = field(
        default_factory=list, metadata={"doc": "Never offer these tools (globs)."}
    )
    sandbox: bool = _f(
        False, "stdio: run the server inside bubblewrap (workspace read-only unless writable)."
    )
    network: bool = _f(False, "With sandbox: allow the server the network.")
    readable: list[str] = field(
        default_factory=list, metadata={"doc": "With sandbox: extra paths it may read."}
    )
    writable: list[str] = field(default_factory=list, metadata={"doc": "With sandbox: paths it may write."})


NotifyEvent = Literal["done", "failed", "cancelled", "dead", "waiting"]
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = get_args(NotifyEvent)


@dataclass(slots=True)
class NotifySettings:
    __pydantic_config__ = _FORBID_EXTRA

    command: list[str] = field(
        default_factory=list,
        metadata={
            "doc": 'A program and its arguments, e.g. ["notify-send", "steward"] (no shell): run with '
            "the job as JSON on stdin and STEWARD_JOB_ID, STEWARD_JOB_STATUS, STEWARD_JOB_EVENT set."
        },
    )
    url: str | None = _f(None, "An http:// or https:// URL the job is POSTed to as JSON.")
    on: list[NotifyEvent] = field(
        default_factory=lambda: list(NOTIFY_EVENTS),
        metadata={"doc": "Events that notify: the job ended done, failed, cancelled or dead; waiting."},
    )
    timeout_s: float = _f(
        10.0, "Longest a notification may take (the command, or the POST with its retries).", gt=0, le=300
    )
    headers: dict[str, str] = field(
        default_factory=dict, metadata={"doc": 'Extra HTTP headers, e.g. {Authorization = "Bearer ..."}.'}
    )
    secret: str | None = _f(
        None, "Signs each POST: X-Steward-Signature: sha256=<hex HMAC-SHA256 of the body with this key>."
    )


@dataclass(slots=True)
class ChannelSettings:
    __pydantic_config__ = _FORBID_EXTRA

    secret: str = _f("", "Key of the HMAC-SHA256 signature inbound messages carry (X-Steward-Signature).")
    reply_url: str | None = _f(None, "Where replies to the user are POSTed as JSON {user, text, ...}.")
    reply_headers: dict[str, str] = field(
        default_factory=dict, metadata={"doc": "Extra headers of each reply POST (its own auth, say)."}
    )
    persona: str = _f("", "The persona the channel's jobs run as (empty: the workspace's own settings).")
    workspace: str | None = _f(None, "The workspace the channel's jobs run in (default: the server's).")


@dataclass(slots=True)
class ServerSettings:
    __pydantic_config__ = _FORBID_EXTRA

    roots: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "Folders whose subfolders clients may name as a run's workspace (default: the folder "
            "the server was started in)."
        },
    )
    max_body_kb: int = _f(256, "Largest request body accepted, in KiB.", ge=1, le=65_536)
    cors_origins: list[str] = field(
        default_factory=list,
        metadata={"doc": "Origins allowed to call the API from a browser (none: no CORS)."},
    )
    keepalive_s: float = _f(15.0, "Seconds between keep-alive comments on an idle event stream.", gt=0)
    poll_s: float = _f(
        0.5, "How often followed runs are looked at when nothing tells (SQLite; PostgreSQL's fallback).", gt=0
    )
    channels: dict[str, ChannelSettings] = field(
        default_factory=dict, metadata={"doc": "Chat channels by name: POST /v1/channels/webhook/NAME."}
    )


@dataclass(slots=True)
class TelemetrySettings:
    __pydantic_config__ = _FORBID_EXTRA

    enabled: bool = _f(False, "Send OpenTelemetry traces of runs over OTLP/HTTP (needs steward[otel]).")
    endpoint: str = _f(
        "", "The collector, e.g. http://localhost:4318 (empty: OTEL_EXPORTER_OTLP_ENDPOINT, else that one)."
    )
    headers_env: str | None = _f(
        None, "Environment variable holding the export's headers: key=value,key2=value2 (an API key)."
    )
    service_name: str = _f("steward", "The traces' service.name.")
    sample_ratio: float = _f(
        1.0, "Share of runs traced (a run's whole trace, its children's spans with it).", ge=0, le=1
    )
    record_content: bool = _f(
        False, "Put prompts, replies, tool arguments and results in the spans (secrets redacted)."
    )


PROVIDERS = ("anthropic", "ollama", "openai")


@dataclass(slots=True)
class Config:
    __pydantic_config__ = _FORBID_EXTRA

    model: str | None = _f(None, "provider:model, e.g. openai:gpt-4o-mini or scripted:FILE.")
    instructions: str = _f("", "Extra instructions added to the agent's system prompt.")
    prompt: Literal["full", "compact"] = _f(
        "full",
        "compact: a shorter static prompt (phase guide, agent_step and tool descriptions cut to the "
        "essentials), for small models on slow servers; full: the whole guide.",
    )
    models: dict[str, ProviderSettings] = field(
        default_factory=dict,
        metadata={"doc": "Per-provider settings: [models.openai], [models.anthropic]..."},
    )
    limits: Limits = field(default_factory=Limits, metadata={"doc": "Limits of a run."})
    budget: BudgetSettings = field(
        default_factory=BudgetSettings, metadata={"doc": "Budgets: tokens, money, time, tool calls."}
    )
    prices: dict[str, PriceSettings] = field(
        default_factory=dict, metadata={"doc": 'Model prices: [prices."provider:model"] input_per_mtok = ...'}
    )
    policy: PolicySettings = field(default_factory=PolicySettings, metadata={"doc": "Rules and modes."})
    git: GitSettings = field(
        default_factory=GitSettings, metadata={"doc": "Git tools, push and pull requests."}
    )
    code: CodeSettings = field(default_factory=CodeSettings, metadata={"doc": "execute_code."})
    sandbox: SandboxConfig = field(default_factory=SandboxConfig, metadata={"doc": "The OS sandbox."})
    store: StoreSettings = field(default_factory=StoreSettings, metadata={"doc": "Where runs are recorded."})
    memory: MemorySettings = field(
        default_factory=MemorySettings, metadata={"doc": "Core memory blocks and long-term memory."}
    )
    cache: CacheSettings = field(
        default_factory=CacheSettings, metadata={"doc": "Reuse of model replies (off by default)."}
    )
    tools: ToolsSettings = field(default_factory=ToolsSettings, metadata={"doc": "Tool discovery."})
    rules: RulesSettings = field(default_factory=RulesSettings, metadata={"doc": "AGENTS.md and skills."})
    mcp_servers: dict[str, McpServerConfig] = field(
        default_factory=dict, metadata={"doc": "MCP servers by name: [mcp_servers.NAME] with command or url."}
    )
    checkpoints: CheckpointSettings = field(
        default_factory=CheckpointSettings, metadata={"doc": "Workspace checkpoints and rewind."}
    )
    notify: NotifySettings = field(
        default_factory=NotifySettings, metadata={"doc": "Who is told when a job ends or waits."}
    )
    server: ServerSettings = field(
        default_factory=ServerSettings, metadata={"doc": "steward serve: roots, limits, channels."}
    )
    telemetry: TelemetrySettings = field(
        default_factory=TelemetrySettings, metadata={"doc": "OpenTelemetry traces (off by default)."}
    )


_SECTIONS: dict[str, type[Any]] = {
    "": Config,
    "limits": Limits,
    "budget": BudgetSettings,
    "prices": PriceSettings,
    "models": ProviderSettings,
    "policy": PolicySettings,
    "git": GitSettings,
    "code": CodeSettings,
    "sandbox": SandboxConfig,
    "store": StoreSettings,
    "memory": MemorySettings,
    "cache": CacheSettings,
    "tools": ToolsSettings,
    "rules": RulesSettings,
    "mcp_servers": McpServerConfig,
    "checkpoints": CheckpointSettings,
    "notify": NotifySettings,
    "server": ServerSettings,
    "telemetry": TelemetrySettings,
}

# Lists that are one value, not a set of rules: a later layer's replaces an earlier one's (a
# command line glued to another command line is neither).
_WHOLE_LISTS = frozenset({"notify.command", "notify.on"})
_ARGV_LISTS = frozenset({"notify.command"})  # a program and its arguments


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "steward" / "config.toml"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML (UTF-8): {exc}. Fix the file or remove it.") from None
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot be read ({exc.strerror}). Fix its permissions or remove it."
        ) from None


def _anchor_script_path(data: dict[str, Any], base: Path) -> None:
    # A script named in a config file is found next to that file, wherever steward runs.
    model = data.get("model")
    if isinstance(model, str) and model.startswith("scripted:"):
        script = Path(model.removeprefix("scripted:"))
        if not script.is_absolute():
            data["model"] = f"scripted:{base / script}"


def anchored_store_url(url: str, base: Path) -> str:
    """``url`` with a relative SQLite file path made absolute against ``base``.

    ``sqlite:///db/x.db`` names ``db/x.db`` relative to wherever the process happens to be; in a
    config file it means the file's folder, and in ``STEWARD_DB`` the current directory (as
    SQLAlchemy reads it), fixed once so a later change of directory cannot move the store.
    ``sqlite:////abs/x.db`` (four slashes), ``:memory:`` and other databases stay as they are.
    """
    scheme, sep, rest = url.partition(":///")
    if not sep or scheme.split("+", 1)[0].lower() != "sqlite":
        return url
    path, mark, query = rest.partition("?")
    if not path or path == ":memory:" or path.startswith("file:") or Path(path).is_absolute():
        return url
    return f"{scheme}:///{base / path}{mark}{query}"


def _anchor_store_url(data: dict[str, Any], base: Path) -> None:
    store = data.get("store")
    if isinstance(store, dict) and isinstance(store.get("url"), str):
        store["url"] = anchored_store_url(store["url"], base)


def _exists(path: Path, *, optional: bool) -> bool:
    """``path.is_file()``, but a directory we may not look into is an error only if it matters."""
    try:
        return path.is_file()
    except OSError as exc:
        if optional:  # e.g. a HOME whose ~/.config this user cannot read: no user file then
            return False
        raise ConfigError(f"{path}: cannot be checked ({exc.strerror}). Fix its permissions.") from None


def _merge(base: dict[str, Any], over: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, f"{where}{key}.")
        elif isinstance(value, list) and isinstance(out.get(key), list) and where + key not in _WHOLE_LISTS:
            # Lists add up across layers: rules from the user file, the project and the
            # command line all apply.
            out[key] = [*out[key], *(v for v in value if v not in out[key])]
        else:
            out[key] = value
    return out


def _allowed(loc: list[str]) -> str:
    if loc and loc[0] in ("models", "mcp_servers", "prices"):
        return ", ".join(f.name for f in fields(_SECTIONS[loc[0]]))
    section = _SECTIONS[loc[0] if len(loc) > 1 else ""]
    return ", ".join(f.name for f in fields(section))


def _check_bounds(obj: Any, where: str, source: str) -> None:
    for f in fields(obj):
        value = getattr(obj, f.name)
        if is_dataclass(value):
            _check_bounds(value, f"{where}{f.name}.", source)
        elif isinstance(value, dict):
            for key, item in value.items():
                if is_dataclass(item):
                    _check_bounds(item, f"{where}{f.name}.{key}.", source)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            for name, ok in (("ge", value.__ge__), ("gt", value.__gt__), ("le", value.__le__)):
                if name in f.metadata and not ok(f.metadata[name]):
                    word = {"ge": "at least", "gt": "more than", "le": "at most"}[name]
                    raise ConfigError(
                        f"{source}: '{where}{f.name}' must be {word} {f.metadata[name]} (got {value!r})"
                    )


def _problem(err: Mapping[str, Any]) -> str:
    """One pydantic error as the user should read it: the key, what is wrong, what is allowed."""
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc)
    got = err.get("input")
    if err["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"unknown key '{key}' (allowed here: {_allowed(loc)})"
    if err["type"] == "bool_type":
        quoted = " (without quotes)" if isinstance(got, str) else ""
        return f"'{key}' must be true or false{quoted}, got {got!r}"
    if err["type"] == "list_type" and isinstance(got, str):
        return f"'{key}' must be a list of strings, not one string: write {loc[-1]} = {_as_list(key, got)}"
    if err["type"] == "literal_error":
        # The key of the setting, not of the list item: 'notify.on', not 'notify.on.0'.
        key = ".".join(str(p) for p in err["loc"] if not isinstance(p, int))
        return f"'{key}' cannot be {got!r}; allowed: {err.get('ctx', {}).get('expected', err['msg'])}"
    if err["type"] in ("int_parsing", "float_parsing") and isinstance(got, str):
        return _number_problem(key, loc[-1], got, whole=err["type"] == "int_parsing")
    return f"'{key}': {err['msg']} (got {got!r})"


def _number_problem(key: str, name: str, got: str, *, whole: bool) -> str:
    """A number written as text ("30d", "80%"): what to write instead, without quotes."""
    kind = "a whole number" if whole else "a number"
    found = re.match(r"\s*(\d+(?:\.\d+)?)\s*(%?)", got)
    if found is None:
        return f"'{key}' must be {kind}, written without quotes, got {got!r}"
    number = float(found.group(1)) / (100 if found.group(2) else 1)
    if name.endswith("_s") and (seconds := _parse_seconds(got)) is not None:  # "10m" is 600 seconds
        number = seconds
    example = f"{number:g}" if not whole else str(int(number))
    return f"'{key}' must be {kind}, written without quotes: {name} = {example} (got {got!r})"


def _as_list(key: str, text: str) -> str:
    """``text`` written as the TOML list it should have been (a JSON list of strings is one)."""
    items = [text]
    if key in _ARGV_LISTS:
        with contextlib.suppress(ValueError):  # unbalanced quotes: show it as one item
            items = shlex.split(text)
    return json.dumps(items)


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or parts.port > 0  # .port raises on a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port_ok


def _check_notify(notify: NotifySettings, source: str) -> None:
    """What the types cannot say about [notify]: a URL to POST to, a program, sendable headers."""
    if notify.url is not None and not _is_http_url(notify.url):
        raise ConfigError(
            f"{source}: 'notify.url' must be an http:// or https:// URL with a host, "
            f'e.g. "https://hooks.example.com/steward" (got {notify.url!r})'
        )
    if notify.command and not notify.command[0].strip():
        raise ConfigError(
            f"{source}: 'notify.command' must start with a program, e.g. "
            f'["notify-send", "steward"] (got {notify.command!r})'
        )
    for name, value in notify.headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigError(f"{source}: 'notify.headers' has {name!r}, which is not a header name")
        if not value.isascii() or any(c in value for c in "\r\n\0"):
            raise ConfigError(
                f"{source}: 'notify.headers.{name}' holds a line break, a NUL or a non-ASCII character, "
                "which a header value cannot"
            )


def _check_telemetry(telemetry: TelemetrySettings, source: str) -> None:
    if telemetry.endpoint and not _is_http_url(telemetry.endpoint):
        raise ConfigError(
            f"{source}: 'telemetry.endpoint' must be the collector's http:// or https:// URL, e.g. "
            f'"http://localhost:4318" (got {telemetry.endpoint!r})'
        )
    if not telemetry.service_name.strip():
        raise ConfigError(f"{source}: 'telemetry.service_name' is empty; name the service, e.g. \"steward\"")


@functools.cache
def _adapter() -> Any:
    """The validator of a whole configuration, built once per process (building it takes
    longer than validating many files)."""
    from pydantic import TypeAdapter

    # Pydantic looks for plugins by scanning the entry points of every installed distribution,
    # which is slow where many are installed; the configuration needs no plugin.
    previous = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "1"
    try:
        return TypeAdapter(Config)
    finally:
        if previous is None:
            del os.environ["PYDANTIC_DISABLE_PLUGINS"]
        else:
            os.environ["PYDANTIC_DISABLE_PLUGINS"] = previous


def _validate(data: Mapping[str, Any], source: str) -> Config:
    from pydantic import ValidationError

    unknown_providers = set(data.get("models") or {}) - set(PROVIDERS)
    if unknown_providers:
        raise ConfigError(
            f"{source}: unknown provider section(s) {sorted(unknown_providers)} under [models]; "
            f"allowed: {', '.join(PROVIDERS)}"
        )
    data = _read_counts(data, source)
    try:
        config: Config = _adapter().validate_python(dict(data))
    except ValidationError as exc:
        problems = [_problem(err) for err in exc.errors(include_url=False)]
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None
    _check_bounds(config, "", source)
    _check_notify(config.notify, source)
    _check_telemetry(config.telemetry, source)
    _check_prices(config.prices, source)
    return config


def _check_prices(prices: Mapping[str, PriceSettings], source: str) -> None:
    """A price is looked up by the whole ``provider:model``: a key without the provider would
    never be used, and the table's price would be counted instead, silently."""
    for key in prices:
        provider, sep, name = key.partition(":")
        if not sep or not provider or not name:
            guess = f"openai:{key}" if not sep else "openai:gpt-4o-mini"
            raise ConfigError(
                f"{source}: [prices.{json.dumps(key)}] names no provider, so no model would use it: write "
                f'the model as --model names it, quoted, e.g. [prices."{guess}"]'
            )


_COUNT = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([kKmM]?)\s*")
_COUNT_SCALE = {"": 1, "k": 1_000, "m": 1_000_000}
_DOLLARS = re.compile(r"\s*\$?\s*(\d+(?:\.\d+)?|\.\d+)\s*(?:usd|USD|\$)?\s*")
_SECONDS = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(s|sec|m|min|h)?\s*")
_SECONDS_SCALE = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
# [budget] values a user may write as text as well as numbers: "200k" or "1.5M" tokens,
# "$0.50", "10m" of running. Each: (how to read it, what to write instead).
_BUDGET_SCOPES = ("", "tree_", "session_")


def parse_count(text: str) -> int | None:
    """``"200k"`` as 200000, ``"1.5M"`` as 1500000, ``"300"`` as 300; None when ``text`` is none of
    these (or not a whole number once scaled)."""
    match = _COUNT.fullmatch(text.replace("_", "").replace(",", ""))
    if match is None:
        return None
    number, unit = match.groups()
    scaled = float(number) * _COUNT_SCALE[unit.lower()]
    return int(scaled) if scaled == int(scaled) else None


def parse_dollars(text: str) -> float | None:
    """``"$0.50"``, ``"0.50"`` or ``"0.50 USD"`` as 0.5; None when ``text`` is no amount."""
    match = _DOLLARS.fullmatch(text.replace(",", ""))
    return float(match.group(1)) if match else None


def _parse_seconds(text: str) -> float | None:
    match = _SECONDS.fullmatch(text)
    return float(match.group(1)) * _SECONDS_SCALE[match.group(2)] if match else None


_BUDGET_TEXT: dict[str, tuple[Any, str]] = {}
for _scope in _BUDGET_SCOPES:
    _BUDGET_TEXT[f"{_scope}tokens"] = (parse_count, 'KEY = 200000, or with a unit, KEY = "200k" or "1.5M"')
    _BUDGET_TEXT[f"{_scope}tool_calls"] = (parse_count, "a whole number: KEY = 100")
    _BUDGET_TEXT[f"{_scope}cost_usd"] = (parse_dollars, 'US dollars: KEY = 0.50 (or "$0.50")')
    _BUDGET_TEXT[f"{_scope}time_s"] = (_parse_seconds, 'seconds: KEY = 600 (or "600s", "10m", "1.5h")')


def _read_counts(data: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """``data`` with the [budget] values written as text ("200k", "$0.50", "10m") read as numbers."""
    budget = data.get("budget")
    if not isinstance(budget, Mapping):
        return data
    read = {}
    for key, value in budget.items():
        if key not in _BUDGET_TEXT or not isinstance(value, str):
            continue
        parse, write = _BUDGET_TEXT[key]
        number = parse(value)
        if number is None:
            raise ConfigError(
                f"{source}: 'budget.{key}' cannot be {value!r}: write {write.replace('KEY', key)}"
            )
        read[key] = number
    return {**data, "budget": {**budget, **read}} if read else data


def validate_layer(data: Mapping[str, Any], source: str) -> Config:
    """One layer of configuration on its own, over the defaults (a ``ConfigError`` names
    ``source`` and the key)."""
    return _validate(data, source)


def load_config(
    workspace: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    user_file: Path | None = None,
    persona: Mapping[str, Any] | None = None,
    persona_source: str = "persona",
) -> Config:
    """Merge every layer for ``workspace`` and validate the result.

    ``persona`` (``Persona.layer()``: its model, policy and limits) goes above the files and
    below the environment and the command line.
    """
    env = os.environ if environ is None else environ
    layers: list[tuple[str, dict[str, Any]]] = []
    candidates = [user_file or user_config_path()]
    if workspace is not None:
        candidates.append(workspace / "steward.toml")
    if env.get("STEWARD_CONFIG"):
        explicit = Path(env["STEWARD_CONFIG"])
        if not _exists(explicit, optional=False):
            raise ConfigError(f"STEWARD_CONFIG names '{explicit}', which is not a file. Fix or unset it.")
        candidates.append(explicit)
    for n, path in enumerate(candidates):
        if _exists(path, optional=n == 0):
            data = _read_toml(path)
            _anchor_script_path(data, path.parent)
            _anchor_store_url(data, path.absolute().parent)
            layers.append((str(path), data))
    if persona:
        layers.append((persona_source, dict(persona)))
    if env.get("STEWARD_MODEL"):
        layers.append(("STEWARD_MODEL", {"model": env["STEWARD_MODEL"]}))
    if env.get("STEWARD_DB"):
        url = env["STEWARD_DB"]
        with contextlib.suppress(OSError):  # a current directory that is gone: SQLAlchemy says so
            url = anchored_store_url(url, Path.cwd())
        layers.append(("STEWARD_DB", {"store": {"url": url}}))
    if overrides:
        layers.append(("command line", dict(overrides)))
    merged: dict[str, Any] = {}
    for source, data in layers:
        # Each layer is checked on its own so the error names the file that holds the mistake.
        _validate(data, source)
        merged = _merge(merged, data)
    return _validate(merged, "configuration")
