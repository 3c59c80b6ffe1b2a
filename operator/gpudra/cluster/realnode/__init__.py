"""Real nodes (``gpudra up --control-plane kubernetes --real-nodes N``): a real kubelet over containerd, runc and
the CNI bridge, each node in namespaces of its own on this machine; the GPUs are the only simulated part."""
