"""What may run: the guard, the policy's rules, approvals, and their wrapper toolset.

guard.py       judges every proposed action (shell commands parsed, every inner command)
shell_parse.py the shell parser behind the guard and the policy (tree-sitter-bash)
rules.py       allow / ask / deny rules, the two modes, the write switch
programs.py    host files masked so that a program a rule denies cannot run under any name
approvals.py   pending approvals bound to one exact call, with deadlines
wrapper.py     the wrapper toolset that puts the guard and the rules in front of any toolset
"""
