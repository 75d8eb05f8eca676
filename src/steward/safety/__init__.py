"""Safety: four layers, each holding on its own, all on by default.

policy/       what may run: the always-on guard, allow/ask/deny rules, approvals, and the
              wrapper toolset that puts them in front of every tool surface
sandbox/      where it runs: bubblewrap around every command, and the egress proxy that is
              its only way out
checkpoints/  undoing what ran: the shadow repository, complete change detection around each
              call, and the files that are sealed because the host runs them later
secrets/      what must not be seen: secret files, the values they hold, and their redaction

types.py      the verdicts the layers share
protected.py  the paths no agent may change (read by the sandbox, the checkpoints and the tools)
"""
