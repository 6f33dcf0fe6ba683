"""Deprecated path: moved to ``pytest_wedge.topology.compose``."""

from pytest_wedge._moved import moved

__getattr__ = moved(__name__, "pytest_wedge.topology.compose")

if __name__ == "__main__":
    import runpy

    runpy.run_module("pytest_wedge.topology.compose", run_name="__main__")
