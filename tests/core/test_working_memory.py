"""Working memory (seed 000): plan advancement, facts, errors and the rendered view."""

from __future__ import annotations

from steward.memory.working import ErrorEntry, Fact, Step, WorkingMemory

SEED_000_VIEW = """\
--- Agent Working Memory ---

[PLAN v1]  Goal: Migrate auth module to JWT
  ✓ Sub-task 1: Audit current auth code
  → Sub-task 2: Create JWT utils         ← CURRENT
  ○ Sub-task 3: Replace session calls    (needs: 2)
  ○ Sub-task 4: Update tests             (needs: 3)

[Key Facts]
  • auth.ts uses express-session for token storage  [step 3]
  • Token access pattern: req.session.userId  [step 3]
  • express-session in package.json  [step 4]

[Steps]
  [Step 1] PLAN: Created 4-step migration plan
  [Step 2] ACT: Read auth.ts
    Tool: read_file
    Result: (full tool output, no truncation)
    Duration: 12ms
  [Step 3] VERIFY: Confirmed express-session usage. Extracted 3 facts.

[Errors]
  (none)

[Context Signals]
  ℹ 5 of 14 steps used

--- End Agent Working Memory ---"""


def migration_plan(memory: WorkingMemory) -> None:
    memory.set_plan(
        "Migrate auth module to JWT",
        [
            (1, "Audit current auth code", ()),
            (2, "Create JWT utils", (1,)),
            (3, "Replace session calls", (2,)),
            (4, "Update tests", (3,)),
        ],
    )


def test_view_matches_seed_000_example() -> None:
    memory = WorkingMemory("run-1")
    migration_plan(memory)
    memory.update_sub_task_status(1, "done")
    memory.advance_to_next_sub_task()
    memory.add_step(Step(1, "plan", "", "Created 4-step migration plan"))
    memory.add_step(
        Step(2, "act", "", "Read auth.ts", "read_file", {"path": "auth.ts"},
             "(full tool output, no truncation)", "success", 12.0, "call_2")
    )  # fmt: skip
    memory.add_step(Step(3, "verify", "", "Confirmed express-session usage. Extracted 3 facts."))
    memory.add_key_facts(
        [
            Fact("auth.ts uses express-session for token storage", 3, "read_file"),
            Fact("Token access pattern: req.session.userId", 3, "read_file"),
            Fact("express-session in package.json", 4, "bash"),
        ]
    )
    assert memory.render_view("ℹ 5 of 14 steps used") == SEED_000_VIEW


def test_empty_memory_shows_only_the_errors_section() -> None:
    view = WorkingMemory("r").render_view()
    assert view == "--- Agent Working Memory ---\n\n[Errors]\n  (none)\n\n--- End Agent Working Memory ---"


def test_first_sub_task_is_current_after_planning() -> None:
    memory = WorkingMemory("r")
    migration_plan(memory)
    assert memory.plan is not None
    assert memory.plan.current_sub_task == 1
    assert memory.plan.version == 1


def test_advancing_respects_depends_on() -> None:
    memory = WorkingMemory("r")
    memory.set_plan("g", [(1, "a", ()), (2, "b", (1, 3)), (3, "c", ())])
    memory.update_sub_task_status(1, "done")
    # 2 still needs 3, so 3 comes first even though it is listed later.
    assert memory.advance_to_next_sub_task() == 3
    memory.update_sub_task_status(3, "done")
    assert memory.advance_to_next_sub_task() == 2
    memory.update_sub_task_status(2, "done")
    assert memory.advance_to_next_sub_task() is None


def test_a_failed_dependency_blocks_its_dependants() -> None:
    memory = WorkingMemory("r")
    memory.set_plan("g", [(1, "a", ()), (2, "b", (1,))])
    memory.update_sub_task_status(1, "failed")
    assert memory.advance_to_next_sub_task() is None
    assert "✗ Sub-task 1: a" in memory.render_view()


def test_replanning_increments_the_version() -> None:
    memory = WorkingMemory("r")
    migration_plan(memory)
    memory.set_plan("Smaller goal", [(1, "only step", ())])
    assert memory.plan is not None
    assert memory.plan.version == 2
    assert "[PLAN v2]  Goal: Smaller goal" in memory.render_view()


def test_full_tool_output_is_in_the_inline_view() -> None:
    memory = WorkingMemory("r")
    output = "line one\nline two\n" + "x" * 5000
    memory.add_step(Step(1, "act", "", "Run it", "bash", {"command": "x"}, output, "success", 3.0, "c1"))
    view = memory.render_view()
    assert "x" * 5000 in view
    assert "    Result: line one\n    line two" in view


def test_errors_show_and_resolve() -> None:
    memory = WorkingMemory("r")
    memory.add_error(ErrorEntry(4, "File not found: a.py", "read_file", "not_found"))
    assert "✗ [step 4] read_file: File not found: a.py (not_found) — unresolved" in memory.render_view()
    memory.resolve_error(4, "Listed the directory; the file is b.py")
    view = memory.render_view()
    assert "✓ [step 4] read_file: File not found: a.py (not_found) → resolved: Listed the directory" in view
    assert memory.last_unresolved_error() is None


def test_failed_step_result_is_marked() -> None:
    memory = WorkingMemory("r")
    memory.add_step(Step(2, "act", "", "Read", "read_file", {}, "not found", "failed", 1.0, "c"))
    assert "Result: FAILED: not found" in memory.render_view()


def test_folded_steps_keep_a_summary_line() -> None:
    memory = WorkingMemory("r")
    for n in range(1, 11):
        memory.add_step(
            Step(n, "act", "", f"step {n}", "bash", {}, "out", "failed" if n == 2 else "success", 1.0)
        )
    view = memory.render_view(first_step_shown=8)
    assert "[Steps 1-8] 8 older entries folded (8 tool calls, 1 failed)" in view
    assert "[Step 3]" not in view
    assert "[Step 9] ACT: step 9" in view


def test_error_register_summarises_command_output_by_its_verdict() -> None:
    from steward.memory.working import error_summary

    output = "test_a ... ok\ntest_b ... FAIL\n\nFAILED (failures=1)\nexit code: 1"
    assert error_summary(output) == "FAILED (failures=1) · exit code: 1"
    assert error_summary("File 'a.py' not found.\nUse list_dir") == "File 'a.py' not found."
    assert error_summary("x" * 500).endswith("…")
