"""The chaos suite: a virtstream cluster spread over network namespaces on this machine,
faults injected one at a time over a VM workload, and what became of the VMs after each
(`python -m bench.chaos`; docs/OPERATIONS.md shows its table)."""
