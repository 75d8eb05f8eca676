"""wc.py FILE: print how many lines, words and characters FILE has."""

import sys


def counts(text):
    lines = text.count("\n")
    words = len(text.split(" "))
    return lines, words, len(text)


def main(argv):
    if len(argv) != 2:
        print("usage: wc.py FILE", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as handle:
        lines, words, chars = counts(handle.read())
    print(f"{lines} {words} {chars}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
