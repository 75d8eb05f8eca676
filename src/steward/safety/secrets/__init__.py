"""What must not be seen: secret files, the values they hold, their redaction.

values.py   which file names hold secrets, reading their values, the redactor
wrapper.py  the outermost wrapper toolset that redacts every tool output
"""
