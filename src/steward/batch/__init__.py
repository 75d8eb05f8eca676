"""Batches and evaluation: a task set run K times through the job queue, and its report.

``tasks``: the task file (JSON lines) read and checked before anything is queued. ``passk``:
the unbiased pass@k estimator. ``plan``: the batch's directory, its manifest, and the fresh
workspace of each attempt, queued under keys that make queueing it again a no-op. ``follow``:
the attempts watched to their end, each one's verifier run in the sandbox and its outcome kept.
``report``: pass@1 / pass@k, steps, tokens, cost and time per task, and the trajectories
grouped per task.
"""
