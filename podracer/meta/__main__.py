"""`python -m podracer.meta` (podracer/meta/cli.py)."""

import sys

from podracer.meta.cli import main

if __name__ == "__main__":
  sys.exit(main())
