"""A real node's containerd: its configuration (pure) and its images.

containerd 2.x with its CRI plugin, CDI on (it always is in 2.x) reading the node's ``/var/run/cdi`` only (the
machine's ``/etc/cdi`` is not the node's), runc through the runc shim with cgroupfs (the kubelet's driver), the
node's CNI configuration, and the sandbox image gpudra builds (no registry serves ``registry.k8s.io/pause`` here).
``restrict_oom_score_adj`` keeps a container's OOM score no lower than containerd's own: lowering it needs
CAP_SYS_RESOURCE, which a node sharing its machine (or a machine in a container) may not have, and runc then fails
every sandbox with "failed to update /proc/self/oom_score_adj: Permission denied".
"""

from __future__ import annotations

from pathlib import Path

from gpudra.cluster.realnode.runtime import NodeImages, NodeRuntime
from gpudra.cluster.realnode.sandbox import NodeDirs, NodeSandbox, run

SOCKET = "/run/containerd/containerd.sock"
"""containerd's socket inside the node."""
NAMESPACE = "k8s.io"
"""The containerd namespace of the CRI plugin (the kubelet's containers and images)."""
DISABLED_PLUGINS = (
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.blockfile",
    "io.containerd.snapshotter.v1.erofs",
    "io.containerd.differ.v1.erofs",
    "io.containerd.nri.v1.nri",
)
"""Snapshotters a node never uses (each probes the machine at start) and NRI (no plugins)."""


def _toml_list(items: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def containerd_config(dirs: NodeDirs, runtime: NodeRuntime, images: NodeImages) -> str:
    """The node's config.toml (version 3, as containerd 2.0 to 2.4 read it)."""
    return f"""version = 3
root = '{dirs.containerd_root}'
state = '/run/containerd'
disabled_plugins = {_toml_list(DISABLED_PLUGINS)}

[grpc]
  address = '{SOCKET}'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{images.sandbox}'

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ['/var/run/cdi']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '{runtime.runc}'
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{runtime.cni}']
    conf_dir = '{dirs.cni_conf}'
"""


async def import_images(sandbox: NodeSandbox, runtime: NodeRuntime, archives: list[Path]) -> None:
    """Load docker archives into the node's containerd (the CRI's namespace), unpacked for the first pod."""
    for archive in archives:
        await run(
            sandbox.inside(
                [
                    str(runtime.ctr),
                    "--address",
                    SOCKET,
                    "--namespace",
                    NAMESPACE,
                    "images",
                    "import",
                    str(archive),
                ]
            )
        )
