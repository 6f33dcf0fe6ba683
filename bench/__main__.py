"""Run every benchmark (or those named) and print ``name: value`` lines with medians."""

from __future__ import annotations

import importlib
import sys

BENCHES = ["topology", "diagnosis", "probe", "linkrates", "load", "catalog", "docker", "wedges"]


def main(argv: list[str]) -> int:
    for name in argv or BENCHES:
        importlib.import_module(f"bench.{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
