"""Deprecated path: moved to ``pytest_wedge.topology.running``."""

from pytest_wedge._moved import moved

__getattr__ = moved(__name__, "pytest_wedge.topology.running")
