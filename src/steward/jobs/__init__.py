"""Agents as a fleet (seed 003): the job queue and the workers that drive it.

``store``: the ``jobs`` table (submit, claim under a lease with a fencing token, heartbeat,
wait, release, finish, cancel, retry) on SQLite and PostgreSQL.
"""
