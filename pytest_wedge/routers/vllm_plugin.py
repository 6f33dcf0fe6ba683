"""A vLLM general plugin, copied into the engine's environment (``wedge_vllm_plugin``) and
found there through its ``vllm.general_plugins`` entry point; nothing of pytest-wedge is
imported. Patches, each set by an environment variable:

- ``WEDGE_NIXL_ROUTE`` (``HOST:PORT=HOST:PORT[,...]``): each decode reaches a prefill's NIXL
  side channel through its own Toxiproxy link. A prefill binds the address it advertises, so it
  cannot advertise the proxy's: the route is taken on the decode's side, as the stubs'
  ``--bootstrap-route`` does.
- ``WEDGE_NIXL_PROGRESS_THREAD`` (``0``/``1``): whether NIXL runs its UCX progress thread.
- ``WEDGE_NIXL_PROGRESS_DELAY_US``: that thread's wait, when it runs. NIXL's Python agent
  hard-codes it to 0, so the thread polls UCX without sleeping and holds a core at idle; a wait
  lets it sleep, but transfers over UCX's TCP transport then stall (measured;
  docs/testing-on-a-real-engine.md).
"""

import os


def register() -> None:
    _route_handshakes(os.environ.get("WEDGE_NIXL_ROUTE", ""))
    thread = os.environ.get("WEDGE_NIXL_PROGRESS_THREAD", "1") != "0"
    _progress(thread, int(os.environ.get("WEDGE_NIXL_PROGRESS_DELAY_US", "0") or 0))


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


def _progress(thread: bool, delay_us: int) -> None:
    if thread and delay_us <= 0:
        return
    try:
        from nixl import _api
    except ImportError:
        return
    bind = _api.nixlBind
    original = bind.nixlAgent

    def agent(name: str, config: object) -> object:
        if thread:
            config.pthrDelay = delay_us  # type: ignore[attr-defined]
        else:
            config.useProgThread = False  # type: ignore[attr-defined]
            # Without the thread, vLLM's handshake thread and its engine loop both call into
            # the agent: STRICT makes the agent serialize them, as UCX's single-threaded
            # worker then needs (NIXL's own notes rely on the agent's lock in that case).
            config.syncMode = bind.NIXL_THREAD_SYNC_STRICT  # type: ignore[attr-defined]
        return original(name, config)

    bind.nixlAgent = agent
