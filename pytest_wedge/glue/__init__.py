"""pytest glue behind ``plugin.py``: settings, the marker, hook specs, the report section,
the plugin's per-process state and the scenario items. Only this package and ``plugin.py``
import pytest."""
