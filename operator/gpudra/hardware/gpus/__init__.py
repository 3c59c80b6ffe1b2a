"""A node's GPUs as types: what a reading of them holds (inventory), the GPU catalog, the backend protocol
the agent calls them through, the PCI names, MIG facts. Pure: no NVML, no sysfs."""
