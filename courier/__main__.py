"""``python -m courier``: the operator CLI (see ``courier.cli``)."""

import sys

from courier.cli import main

if __name__ == "__main__":
    sys.exit(main())
