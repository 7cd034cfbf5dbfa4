"""``python -m chaos``: the chaos soak (see ``chaos.cli``)."""

import sys

from chaos.cli import main

if __name__ == "__main__":
    sys.exit(main())
