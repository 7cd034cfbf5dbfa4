"""``python -m model.explore``: explore the bounds the options give and print the report."""

import sys

from model.explore.cli import main

if __name__ == "__main__":
    sys.exit(main())
