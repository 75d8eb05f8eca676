"""Memory that outlives a run: core memory blocks the agent edits through tools (seed 002)."""
