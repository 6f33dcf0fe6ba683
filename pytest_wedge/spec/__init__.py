"""What runs, as pure data (no I/O, no HTTP client): the topology, its components, links,
workers and the marker's keywords. The running topology is ``topology/``."""
