"""What is observed: Prometheus text, the evidence snapshot, the probe and process stacks."""
