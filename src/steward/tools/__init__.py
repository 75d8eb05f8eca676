"""Tools: the @tool decorator, toolsets, and the built-in file, search and shell tools."""
