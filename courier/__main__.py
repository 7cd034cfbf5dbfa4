"""``python -m courier``: the operator CLI (see ``courier.cli``).

``python -m`` puts the current folder first on ``sys.path``, so a user's own
``worker.py`` (or ``model.py``, ``pgworker.py``) there would be imported instead of
the queue's. The console script ``courier`` never searches the current folder;
``python -m courier`` is made to behave the same: the current folder is dropped
from the search path unless it is the one holding this package (a source
checkout, run from its root).
"""

import os
import sys

_HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [
    entry
    for entry in sys.path
    if os.path.abspath(entry or os.curdir) != os.getcwd() or os.getcwd() == _HOME
]

from courier.cli import main  # noqa: E402  (after the search path is fixed)

if __name__ == "__main__":
    sys.exit(main())
