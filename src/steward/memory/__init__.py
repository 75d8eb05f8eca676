"""Memory: every layer of what an agent remembers, in one home (DESIGN.md, "Memory layers").

1. **Static** (persona, rules, skills, tool and phase guides) is not stored here: it is built
   once per run from the config and the workspace (``steward.rules``, ``steward.agent``).
2. **Session**: a conversation's earlier turns and summaries, and the core memory blocks.
   ``session`` (``Session``, ``History``, the running and closing summaries) reads turns from
   ``session_store``; ``blocks`` holds the labelled, size-capped core memory blocks and their
   edit tools, ``block_store`` keeps their values.
3. **Working**: the run's plan, steps, errors and facts, rendered as the view before every
   model call (``working``), and its transcript as sent: compacted, elided, folded
   (``transcript``).
4. **Long-term**: what outlives runs, searched by tools. ``archive`` keeps summaries and searches
   past work; ``history`` is the ``search_history`` tool over it, ``recall`` the
   ``recall_output`` tool for outputs elided from the transcript.

Across layers: ``compression`` has the model summarise large outputs, old turns, failed
attempts and sessions; ``budget`` turns the token budget into characters, in one place.

Dependencies point inward: memory uses events, models, tools' base types and the store's
engine and tables; the request builder (``steward.context``), the run state and the loop use
memory, never the other way (``Session`` alone names ``Agent`` and ``Run``, for typing). This
package imports nothing on import: take what you need from its modules.
"""
