"""pytest-wedge benchmarks: ``python -m bench [name ...]`` prints ``name: value`` lines."""
