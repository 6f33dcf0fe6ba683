"""A vLLM general plugin, copied into the engine's environment (``wedge_vllm_plugin``) and
found there through its ``vllm.general_plugins`` entry point; nothing of pytest-wedge is
imported. Two patches, each set by an environment variable:

- ``WEDGE_NIXL_ROUTE`` (``HOST:PORT=HOST:PORT[,...]``): each decode reaches a prefill's NIXL
  side channel through its own Toxiproxy link. A prefill binds the address it advertises, so it
  cannot advertise the proxy's: the route is taken on the decode's side, as the stubs'
  ``--bootstrap-route`` does.
- ``WEDGE_NIXL_PROGRESS_DELAY_US``: NIXL's Python agent hard-codes its progress thread's wait
  to 0, so the thread polls UCX without sleeping and holds a core at idle. A wait lets it sleep,
  but transfers over UCX's TCP transport then stall (measured; docs/testing-on-a-real-engine.md),
  so it is set only on request.
"""

import os


def register() -> None:
    _route_handshakes(os.environ.get("WEDGE_NIXL_ROUTE", ""))
    _progress_delay(int(os.environ.get("WEDGE_NIXL_PROGRESS_DELAY_US", "0") or 0))


def _route_handshakes(spec: str) -> None:
    pairs = [pair.split("=", 1) for pair in spec.split(",")]
    routes = {pair[0]: pair[1] for pair in pairs if len(pair) == 2}
    if not routes:
        return
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl import base_worker

    original = base_worker.make_zmq_path

    def routed(scheme: str, host: str, port: int | None = None) -> str:
        to = routes.get(f"{host}:{port}")
        if to is None:
            return str(original(scheme, host, port))
        new_host, new_port = to.rsplit(":", 1)
        return str(original(scheme, new_host, int(new_port)))

    base_worker.make_zmq_path = routed


def _progress_delay(delay_us: int) -> None:
    if delay_us <= 0:
        return
    try:
        from nixl import _api
    except ImportError:
        return
    original = _api.nixlBind.nixlAgent

    def agent(name: str, config: object) -> object:
        config.pthrDelay = delay_us  # type: ignore[attr-defined]
        return original(name, config)

    _api.nixlBind.nixlAgent = agent
