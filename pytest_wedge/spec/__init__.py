"""What runs, as pure data: the topology, its components, links, workers and the marker's keywords.

Below ``runtime/``: nothing here does I/O or imports an HTTP client. The running topology is
``topology/``.
"""
