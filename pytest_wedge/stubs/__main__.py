"""`python -m pytest_wedge.stubs --role prefill|decode --port P ...`"""

from __future__ import annotations

from .config import parse_args
from .server import main

if __name__ == "__main__":
    main(parse_args())
