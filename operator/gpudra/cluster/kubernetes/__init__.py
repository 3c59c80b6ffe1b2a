"""The real Kubernetes control plane behind ``gpudra up --control-plane kubernetes``: etcd, kube-apiserver,
kube-scheduler and kube-controller-manager built from Kubernetes' own Go modules (``make kubernetes``), run on
loopback with TLS, RBAC and admission as a real cluster has them."""
