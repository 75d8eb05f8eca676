"""Safety: an always-on guard, an allow/ask/deny policy, approvals, and the OS sandbox.

guard.py       judges every proposed action (shell commands parsed, every inner command)
shell_parse.py the shell parser behind the guard and the policy (tree-sitter-bash)
policy.py      allow / ask / deny rules, modes, the write switch
approvals.py   pending approvals bound to one exact call, with deadlines
sandbox.py     bubblewrap around every command-running tool
toolset.py     the wrapper toolset that puts all of this in front of any toolset
"""
