"""Reading settings from a key=value file, with defaults for what it leaves out."""

DEFAULTS = {"port": "8080", "host": "127.0.0.1"}


def read_settings(path):
    settings = DEFAULTS
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                settings[key.strip()] = value.strip()
    return settings
