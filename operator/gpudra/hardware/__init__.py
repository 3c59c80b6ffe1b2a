"""The GPU seam: what the node's GPUs are, read through NVML (real or simulated)."""
