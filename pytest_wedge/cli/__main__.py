"""``python -m pytest_wedge.cli``: the ``pytest-wedge`` command without its script."""

import sys

from pytest_wedge.cli import main

sys.exit(main())
