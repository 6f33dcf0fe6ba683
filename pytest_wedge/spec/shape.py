"""A topology shape's (runtime and spec) stable name, the same in every xdist worker: it hashes
the spec's ``repr``, which holds no sets, whose order changes with hash randomisation.
"""

from __future__ import annotations

import hashlib

from pytest_wedge.spec.topology import TopologySpec


def shape_id(spec: TopologySpec, runtime: str) -> str:
    """``wedge-process-1p1d-3f2a9c1e``: readable counts, and a hash of everything else."""
    digest = hashlib.sha256(f"{runtime}\0{spec!r}".encode()).hexdigest()[:8]
    return f"wedge-{runtime}-{spec.prefill}p{spec.decode}d-{digest}"
