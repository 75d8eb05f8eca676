"""Agents as a fleet (seed 003): the job queue and the workers that drive it.

``store``: the ``jobs`` table (submit, claim under a lease with a fencing token, heartbeat,
wait, release, finish, cancel, retry) on SQLite and PostgreSQL. ``worker``: claims jobs and
drives their runs. ``replies``: answers and approvals for waiting jobs, through the queue.
``delegation``: the ``delegate`` tool (child jobs). ``notify``: the hook told when a job ends
or waits. ``api``: ``Queue`` and ``JobHandle`` for Python programs.
"""
