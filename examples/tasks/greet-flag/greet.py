"""greet.py NAME [--shout]: say hello."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="greet.py")
    parser.add_argument("name")
    parser.add_argument("--shout", action="store", help="greet in capitals")
    args = parser.parse_args(argv)
    line = f"Hello, {args.name}!"
    print(line.upper() if args.shout else line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
