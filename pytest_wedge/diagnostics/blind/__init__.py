"""The blind locator: the wedge from what an operator observes (``Observed``) alone. Nothing
here may read ground truth; ``tests/unit/test_blind_isolation.py`` walks its imports."""

from pytest_wedge.diagnostics.blind.locate import locate_blind

__all__ = ["locate_blind"]
