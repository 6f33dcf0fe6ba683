"""Deprecated path: moved to ``pytest_wedge.glue.report``."""

from pytest_wedge._moved import moved

__getattr__ = moved(__name__, "pytest_wedge.glue.report")
