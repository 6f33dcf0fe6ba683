"""The ``pytest-wedge`` command: ``install-toxiproxy``, ``up``, ``doctor``, ``docs`` and
``reference``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_wedge.errors import WedgeError
from pytest_wedge.routers.router_spec import BUILT_IN, WORKER_PROTOCOLS

__all__ = ["build_parser", "main"]


ROUTER_ENV = "PYTEST_WEDGE_ROUTER"  # the environment variable of --wedge-router


def router_option(what: str) -> dict[str, Any]:
    """``--router``, as pytest's ``--wedge-router``: the same kinds, the same variable."""
    return {
        "choices": BUILT_IN,
        "default": os.environ.get(ROUTER_ENV) or "smg",
        "help": f"{what}: {', '.join(BUILT_IN)} (default: ${ROUTER_ENV}, else smg)",
    }


def build_parser() -> argparse.ArgumentParser:
    from pytest_wedge.cli.install import CHECKSUMS_ENV, URL_ENV, default_dest

    parser = argparse.ArgumentParser(
        prog="pytest-wedge",
        description="Distributed-hang fault injection for PD-disaggregated LLM serving.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    install = commands.add_parser(
        "install-toxiproxy",
        help="install Toxiproxy v2.12.0 (go install, or the checksum-checked release binary)",
        description="Install toxiproxy-server v2.12.0 where pytest-wedge finds it. With Go "
        "on PATH it is built with `go install`; otherwise this platform's release binary is "
        "downloaded and checked against its pinned SHA-256.",
    )
    install.add_argument(
        "--dest",
        type=Path,
        default=default_dest(),
        help="directory to install into (default: this environment's bin/, %(default)s)",
    )
    install.add_argument(
        "--method",
        choices=("auto", "go", "download"),
        default="auto",
        help="auto (default): go when Go is on PATH, else download",
    )
    install.add_argument(
        "--base-url",
        default=None,
        help=f"where the release assets are (default: ${URL_ENV}, else the GitHub release)",
    )
    install.add_argument(
        "--checksums",
        type=Path,
        default=None,
        help=f"a `SHA256  NAME` file replacing the pinned table (default: ${CHECKSUMS_ENV})",
    )
    install.add_argument(
        "--force", action="store_true", help="install even if v2.12.0 is there already"
    )

    up = commands.add_parser(
        "up",
        help="bring a topology up, print its URLs and links, keep it until Ctrl-C",
        description="Bring up the topology the wedge marker would (same keywords), print "
        "every URL and link, and keep it until Ctrl-C or SIGTERM. Router flags go after --: "
        "`pytest-wedge up --decode 2 -- --request-timeout-secs 5`.",
    )
    up.add_argument("--prefill", type=int, default=1, help="prefill workers (default 1)")
    up.add_argument("--decode", type=int, default=1, help="decode workers (default 1)")
    up.add_argument(
        "--router-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one extra router argument (repeat it; write --router-arg=--flag)",
    )
    up.add_argument(
        "--stub",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a stub option (StubOptions field), e.g. --stub itl_ms=5",
    )
    up.add_argument(
        "--runtime", choices=("process", "docker"), default=None, help="process (default) or docker"
    )
    up.add_argument(
        "--router",
        **router_option("the router kind (a pinned kind's cached venv is made on first use)"),
    )
    up.add_argument(
        "--worker-protocol",
        choices=WORKER_PROTOCOLS,
        default="sglang",
        help="the stubs' protocol: sglang (default) or vllm (for vllm-router)",
    )
    up.add_argument(
        "--worker",
        choices=("stub", "vllm"),
        default="stub",
        help="the workers: our stubs (default) or real vLLM on CPU (its environment and a tiny "
        "model are made on first use: minutes; about 7 GB of RAM for 1P+1D)",
    )
    up.add_argument(
        "--model",
        default="",
        metavar="DIR",
        help="with --worker vllm: a model folder of your own (default: the tiny random Llama)",
    )
    up.add_argument(
        "--toxiproxy",
        default=None,
        metavar="PATH",
        help="the toxiproxy-server binary (default: discovery, as in pytest)",
    )
    up.add_argument(
        "--artifacts",
        default=".wedge-artifacts",
        help="where the component logs go (default: %(default)s)",
    )
    up.add_argument(
        "--ready-timeout",
        type=float,
        default=None,
        help="seconds the topology may take to come up (default 30; 600 with --worker vllm)",
    )
    up.add_argument(
        "--json", action="store_true", help="print the URLs and links as one JSON object"
    )
    up.add_argument(
        "router_args", nargs="*", metavar="-- ROUTER_ARGS", help="extra router arguments, after --"
    )

    doctor = commands.add_parser(
        "doctor",
        help="show which programs, versions and runtimes are found, and why not",
    )
    doctor.add_argument(
        "--toxiproxy",
        default=None,
        metavar="PATH",
        help="check this toxiproxy-server instead of discovering one",
    )
    doctor.add_argument(
        "--router",
        **router_option(
            "the router kind the run will use (a "
            "pinned kind's venv is made on first use, never by doctor)"
        ),
    )

    docs = commands.add_parser(
        "docs",
        help="list the user docs, or print one (they ship with the package)",
        description="Without NAME, list the docs; with it, print that page's Markdown: "
        "`pytest-wedge docs writing-a-hang-test`, `pytest-wedge docs reference/faults`.",
    )
    docs.add_argument("name", nargs="?", default=None, metavar="NAME", help="the page to print")

    reference = commands.add_parser(
        "reference",
        help="write the reference pages (faults, load options, ledger, metrics)",
        description="Render docs/reference/*.md from the code: every fault and its fields, "
        "every load option, the client ledger's fields and the metrics the evidence reads.",
    )
    reference.add_argument(
        "--out",
        type=Path,
        default=Path("docs") / "reference",
        help="directory to write into (default: %(default)s)",
    )
    reference.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a page there differs from the code",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "install-toxiproxy":
            from pytest_wedge.cli.install import install

            install(
                args.dest,
                method=args.method,
                base_url=args.base_url,
                checksums=args.checksums,
                force=args.force,
            )
            return 0
        if args.command == "up":
            from pytest_wedge.cli.up import run_up

            return run_up(args)
        if args.command == "docs":
            from pytest_wedge.cli.docs import run_docs

            return run_docs(args.name)
        if args.command == "reference":
            from pytest_wedge.cli.reference import run_reference

            return run_reference(args.out, check=args.check)
        from pytest_wedge.cli.doctor import run_doctor

        return run_doctor(args.toxiproxy, router=args.router)
    except WedgeError as exc:
        print(f"pytest-wedge {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
