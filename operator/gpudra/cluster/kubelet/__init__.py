"""The embedded cluster's stand-in kubelet: pod sync with DRA, plugin watching, device health, pod status."""
