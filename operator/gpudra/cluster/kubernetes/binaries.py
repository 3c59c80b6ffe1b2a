"""Where ``make kubernetes`` (hack/kubernetes/build.sh) leaves the binaries: a cache outside the work tree,
keyed by version, ``$GPUDRA_CACHE/kubernetes/v<version>/bin`` and ``$GPUDRA_CACHE/etcd/v<version>/bin``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpudra.errors import ConfigurationError

DEFAULT_KUBERNETES_VERSION = "1.37.2"
"""The newest v1.37 patch release on the Go module proxy; hack/kubernetes/build.sh builds the same by default."""
DEFAULT_ETCD_VERSION = "3.6.16"
CONTROL_PLANE = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")


def cache_dir() -> Path:
    explicit = os.environ.get("GPUDRA_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpudra"


@dataclass(frozen=True)
class Binaries:
    version: str
    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    kubelet: Path
    fake_cri: Path
    """gpudra-fake-cri: Kubernetes' fake container runtime of this version (hack/kubernetes/fakecri)."""

    @property
    def minor(self) -> int:
        return version_minor(self.version)


def version_minor(version: str) -> int:
    """37 for "1.37.2" and 38 for "1.38.0-beta.0"."""
    return int(version.split(".")[1])


def kubernetes_version(version: str | None = None) -> str:
    """The version to run: ``version``, else ``$K8S_VERSION``, else the default; without a leading "v"."""
    return (version or os.environ.get("K8S_VERSION") or DEFAULT_KUBERNETES_VERSION).removeprefix("v")


def find_binaries(
    version: str | None = None, etcd_version: str | None = None, *, need_kubelet: bool = False
) -> Binaries:
    """The binaries of one version, or ConfigurationError naming ``make kubernetes`` and what is missing."""
    version = kubernetes_version(version)
    etcd_version = (etcd_version or os.environ.get("ETCD_VERSION") or DEFAULT_ETCD_VERSION).removeprefix("v")
    k8s = cache_dir() / "kubernetes" / f"v{version}" / "bin"
    found = Binaries(
        version=version,
        etcd=cache_dir() / "etcd" / f"v{etcd_version}" / "bin" / "etcd",
        kube_apiserver=k8s / "kube-apiserver",
        kube_scheduler=k8s / "kube-scheduler",
        kube_controller_manager=k8s / "kube-controller-manager",
        kubelet=k8s / "kubelet",
        fake_cri=k8s / "gpudra-fake-cri",
    )
    wanted = [found.etcd, found.kube_apiserver, found.kube_scheduler, found.kube_controller_manager]
    if need_kubelet:
        wanted += [found.kubelet, found.fake_cri]
    missing = [str(path) for path in wanted if not os.access(path, os.X_OK)]
    if missing:
        raise ConfigurationError(
            f"the real control plane (Kubernetes v{version}, etcd v{etcd_version}) is not built: "
            f"run `make kubernetes` (K8S_VERSION={version}) first; missing {', '.join(missing)}"
        )
    return found
