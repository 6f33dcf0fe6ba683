"""The blind locator: where the wedge is, from what an operator observes (``Observed``) alone.

Nothing in this package may read ground truth: no stub ledger, no fault, no toxic, no
runtime view. ``tests/unit/test_blind_isolation.py`` walks its imports to keep it so.
"""

from pytest_wedge.diagnostics.blind.locate import locate_blind

__all__ = ["locate_blind"]
