"""The node agent: kubelet plugin, CDI specs, checkpoint, ResourceSlice publishing."""
