"""Undoing what ran: whatever a call does to files, one rewind undoes.

shadow.py        the shadow git repository outside the workspace: record, compare, rewind
around_calls.py  a checkpoint before each call that can change files, complete change detection
                 after it, and undoing what the agent may not change
scan.py          the complete walk that finds repository metadata and secret files
wrapper.py       the wrapper toolset that puts checkpoints around every tool surface
"""
