"""The stand-in control plane of the embedded cluster: the parts of kube-controller-manager and kube-scheduler that
DRA needs. Used only by ``gpudra up`` and tests; a real cluster brings its own."""
