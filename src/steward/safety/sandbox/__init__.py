"""Where commands run: the OS sandbox and its only way out.

bubblewrap.py    bubblewrap around every command-running tool (mounts, limits, namespaces)
placeholders.py  mount points for missing protected paths, made and removed beneath the workspace
selfcheck.py     the sandbox's self-check, remembered per machine
egress.py        the egress proxy on the host: allowed domains only, never loopback or private ranges
forward.py       the stdlib-only relay run inside the sandbox towards the proxy's UNIX socket
"""
