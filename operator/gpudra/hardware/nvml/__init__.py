"""The GPUs' I/O: NVML (the backend, the only module importing pynvml, and its GPU, MIG and VFIO parts), the PCI
bus through sysfs, and the read-only recorder."""
