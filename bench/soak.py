"""Moved: the chaos soak is the ``chaos`` package, ``python -m chaos`` (not part of bench).

Only ``tests/unit/test_arbitrary_inputs.py`` still imports ``bench.soak``, to check
the soak's SQL; so this name stands for ``chaos.operator``, the one soak module
that runs SQL of its own (the held write lock). Delete this file once that test
lists ``chaos.operator`` itself.
"""

import sys

from chaos import operator

sys.modules[__name__] = operator
