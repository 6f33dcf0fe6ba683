"""Which files a program needs in the offline docker image: one outside the venv (a router's
isolated venv, a user's build) is added when its component starts; a bare name is looked up on
the image's ``PATH`` and refused up front when the image cannot have it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection
from pathlib import Path

from pytest_wedge.errors import ConfigError

# The image's PATH (its ``ENV PATH``): the project venv's bin/ first.
CONTAINER_PATH = (str(Path(sys.prefix) / "bin"), "/usr/local/bin", "/usr/bin", "/bin")


def program_roots(program: str) -> list[str]:
    """What ``program`` needs in the image: itself, and the whole venv when it is a venv's
    console script (its shebang, ``pyvenv.cfg`` and site-packages live there)."""
    venv = Path(program).parent.parent
    return [program, str(venv)] if (venv / "pyvenv.cfg").is_file() else [program]


def in_image(program: str, paths: Collection[str]) -> bool:
    """Does the image hold ``program``? A file reached through a symlinked directory (a
    symlinked venv) is in the image by its real path."""
    if os.path.isabs(program):
        return os.path.realpath(program) in paths
    return any(os.path.realpath(os.path.join(d, program)) in paths for d in CONTAINER_PATH)


def check_bare_name(name: str, program: str, paths: Collection[str], image: str) -> None:
    """A program given by bare name must be on the image's PATH: nothing else can put it there,
    and a container would only say "exec failed" after the rest of the topology started."""
    if os.sep in program or in_image(program, paths):
        return
    raise ConfigError(
        f"{name}'s program {program!r} is not in the docker image",
        facts={
            "component": name,
            "image": image,
            "looked on the image's PATH": ":".join(CONTAINER_PATH),
            "on this host": _host_path(program),
        },
        fix=f"give {name}'s command its absolute path (a program inside a venv brings the whole "
        "venv into the image), or install it into this environment's venv "
        f"({CONTAINER_PATH[0]}), or use the process runtime",
    )


def _host_path(program: str) -> str:
    import shutil

    return shutil.which(program) or "not found on PATH either"
