"""The running topology: its Toxiproxy, ports, router and workers started, and the session
that caches topologies by spec (the pure specs are in ``pytest_wedge.spec``)."""
