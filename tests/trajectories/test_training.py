"""Exported trajectories are training data: Hugging Face ``datasets`` loads the JSONL and TRL's
``SFTTrainer`` trains on it (``messages`` plus ``tools``), with a tiny randomly initialised model
and a tokenizer made here: nothing is fetched from a model hub."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.trajectories.conftest import Cli
from tests.trajectories.scenarios import WORK, Reply, run, step

from steward.store.events import open_store
from steward.trajectories._export import Selection, lines, selected
from steward.trajectories.environment import StewardEnvironment

REASON = "installed with `pip install torch==2.13.0 '.[train]'` (scripts/test does it)"
datasets = pytest.importorskip("datasets", reason=f"the training tests need datasets, {REASON}")
trl = pytest.importorskip("trl", reason=f"the training tests need trl, {REASON}")
transformers = pytest.importorskip("transformers", reason=f"the training tests need transformers, {REASON}")
tokenizers = pytest.importorskip("tokenizers", reason=f"the training tests need tokenizers, {REASON}")

# Renders the tools, every turn, an assistant's tool calls (arguments as the JSON strings they
# are) and a tool result's call id. The assistant's part is marked as what the loss is taken on.
TEMPLATE = (
    "{%- if tools %}<|tools|>{% for t in tools %}{{ t.function.name }}: {{ t.function.description }} "
    "{{ t.function.parameters | tojson }}\n{% endfor %}<|end|>\n{% endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}<|assistant|>{% generation %}{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}<|call|>{{ c.id }} {{ c.function.name }} {{ c.function.arguments }}"
    "{%- endfor %}<|end|>{% endgeneration %}\n"
    "{%- else -%}<|{{ m.role }}|>{% if m.tool_call_id %}[{{ m.tool_call_id }}] {% endif %}{{ m.content }}<|end|>\n"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif -%}"
)
SPECIAL = [
    "<|pad|>",
    "<|end|>",
    "<|tools|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tool|>",
    "<|call|>",
]


async def _export(tmp_path: Path) -> Path:
    """Three real runs (an answer, a stuck end, a failing verifier), exported as chat JSONL."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    stuck: list[Reply] = [
        [("read_file", {"path": "nope.txt"})],
        [step("end", end_status="stuck", end_message="no")],
    ]
    async with await open_store(url) as store:
        for n, replies in enumerate([WORK, stuck, WORK]):
            workspace = tmp_path / f"ws{n}"
            workspace.mkdir()
            await run(store, workspace, replies, verify="exit 1" if n == 2 else "")
        rows, _ = await selected(store, Selection(every=True))
        path = tmp_path / "train.jsonl"
        with path.open("w", encoding="utf-8") as out:
            async for line in lines(store, rows, "chat"):
                out.write(line + "\n")
    return path


def _tokenizer(texts: list[str], special: list[str] = SPECIAL) -> Any:
    """A byte-level BPE tokenizer trained on ``texts``, with the chat template above; its first
    special token pads."""
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=600, special_tokens=special, initial_alphabet=alphabet
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    end = "<|end|>" if special is SPECIAL else "<|im_end|>"
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, pad_token=special[0], eos_token=end, chat_template=TEMPLATE
    )


def _tiny(tokenizer: Any) -> Any:
    """A randomly initialised one-layer Llama for ``tokenizer``: nothing comes from a hub."""
    return transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16384,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip


async def test_datasets_loads_the_export_and_trl_trains_on_it(tmp_path: Path) -> None:
    path = await _export(tmp_path)
    data = datasets.load_dataset("json", data_files=str(path), split="train")
    assert data.num_rows == 3
    assert {"messages", "tools", "phases", "reward", "run"} <= set(data.column_names)
    assert data["reward"] == [1.0, 0.0, 0.0]
    first = data[0]
    calls = [c for m in first["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert calls and all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)
    assert first["tools"] == json.loads(path.read_text().splitlines()[0])["tools"]

    tokenizer = _tokenizer([path.read_text(encoding="utf-8")])
    model = transformers.AutoModelForCausalLM.from_config(_tiny(tokenizer))
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=1, learning_rate=1e-3,
        max_length=None, assistant_only_loss=True, report_to=[], save_strategy="no", logging_steps=1,
        use_cpu=True, bf16=False, activation_checkpointing=False, dataloader_num_workers=0,
    )  # fmt: skip
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    tokenized = trainer.train_dataset[0]
    rendered = tokenizer.decode(tokenized["input_ids"])
    assert "<|tools|>read_file:" in rendered and '"phase":"plan"' in rendered  # tools and a call's arguments
    trained_on = [label for label in tokenized["labels"] if label != -100]
    assert 0 < len(trained_on) < len(tokenized["input_ids"])  # the loss is on the agent's turns only
    result = trainer.train()
    assert trainer.state.global_step == 2
    assert math.isfinite(result.training_loss) and result.training_loss > 0


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # TRL's own use
@pytest.mark.filterwarnings("ignore:You are using 'environment_factory':UserWarning")
def test_grpo_runs_rollouts_in_steward_environments(tmp_path: Path) -> None:
    """TRL's GRPO loop resets a StewardEnvironment with each task row and takes its verifier's verdict."""
    from trl.chat_template_utils import qwen3_chat_template  # a template TRL knows how to parse calls of

    template = tmp_path / "template"
    template.mkdir()
    (template / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    row = {"prompt": [{"role": "user", "content": "Check calc.py."}], "workspace": str(template),
           "verify": "test -f calc.py && grep -q 'a + b' calc.py"}  # fmt: skip
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>",
               "</tool_response>", "<think>", "</think>"]  # fmt: skip
    tokenizer = _tokenizer([qwen3_chat_template, "read_file write_file edit_file list_dir bash"], special)
    tokenizer.chat_template, tokenizer.padding_side = qwen3_chat_template, "left"
    made: list[StewardEnvironment] = []

    def environment() -> StewardEnvironment:
        made.append(StewardEnvironment(root=tmp_path))
        return made[-1]

    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=8, max_tool_calling_iterations=1, report_to=[], save_strategy="no",
        use_cpu=True, bf16=False, activation_checkpointing=False, logging_steps=1,
    )  # fmt: skip
    trainer = trl.GRPOTrainer(
        model=transformers.AutoModelForCausalLM.from_config(_tiny(tokenizer)), args=args,
        train_dataset=datasets.Dataset.from_list([row, row]), processing_class=tokenizer,
        environment_factory=environment,
    )  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 1
    logged = trainer.state.log_history[0]
    assert logged["rewards/StewardEnvironment/mean"] == 1.0  # each rollout's copy passed its verifier
    assert made and all(e.verify == row["verify"] for e in made if e.workspace is not None)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")
def test_a_batch_report_is_a_dataset_trl_trains_on_and_a_task_set_for_grpo(cli: Cli, tmp_path: Path) -> None:
    """``steward batch`` writes each attempt's trajectory per task and the task rows: datasets loads
    them, SFT trains on them, and the rows reset a GRPO environment whose reward is the verifier's."""
    import yaml

    (tmp_path / "add").mkdir()
    (tmp_path / "add" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    fix = {"tool": "edit_file", "args": {"path": "calc.py", "old_text": "a - b", "new_text": "a + b"}}
    wrong = {"tool": "edit_file", "args": {"path": "calc.py", "old_text": "a - b", "new_text": "a * b"}}
    end = {"agent_step": {"phase": "end", "summary": "fixed", "end_status": "solved", "end_message": "fixed"}}
    (tmp_path / "right.yaml").write_text(yaml.safe_dump([fix, end]))
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump([wrong, end]))
    check = "python3 -c 'from calc import add; assert add(2, 3) == 5'"
    task = {"id": "add", "goal": "Fix add in calc.py", "workspace": "add", "verify": check,
            "script": ["right.yaml", "wrong.yaml"]}  # fmt: skip
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    done = cli("batch", "tasks.jsonl", "-k", "2", "--model", "scripted", "-o", "report", timeout=300)
    assert done.returncode == 0, done.stderr

    trajectories = datasets.load_dataset("json", data_files=str(tmp_path / "report/trajectories/*.jsonl"))[
        "train"
    ]
    assert sorted(trajectories["reward"]) == [0.0, 1.0] and set(trajectories["task"]) == {"add"}
    tokenizer = _tokenizer([(tmp_path / "report/trajectories/add.jsonl").read_text()])
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=1, max_length=None,
        report_to=[], save_strategy="no", use_cpu=True, bf16=False, activation_checkpointing=False,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(_tiny(tokenizer))
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=trajectories, processing_class=tokenizer)
    assert trainer.train().global_step == 1

    (row,) = datasets.load_dataset("json", data_files=str(tmp_path / "report/tasks.jsonl"))["train"]
    environment = StewardEnvironment(root=tmp_path)
    try:
        environment.reset(**row)  # a fresh copy of the task's template, as GRPO's rollouts start
        assert environment.get_reward() == 0.0
        environment.edit_file("calc.py", "a - b", "a + b")
        assert environment.get_reward() == 1.0
    finally:
        environment.close()
