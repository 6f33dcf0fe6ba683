"""Deprecated path: moved to ``pytest_wedge.scenarios.run``."""

from pytest_wedge._moved import moved

__getattr__ = moved(__name__, "pytest_wedge.scenarios.run")
