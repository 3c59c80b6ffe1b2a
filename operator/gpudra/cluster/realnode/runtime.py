"""What a real node runs, as ``make node`` (hack/node/build.sh) and ``make images`` (hack/node/images.sh) leave
it in the cache: containerd, its runc shim, ctr and crictl, the CNI plugins, runc from the machine's packages, and
the images as docker archives named by ``images.json``."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from gpudra.cluster.kubernetes.binaries import cache_dir
from gpudra.errors import ConfigurationError

CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")


@dataclass(frozen=True)
class NodeImages:
    """The images every real node imports: the pods' sandbox, gpudra's own and the GPU workload's."""

    sandbox: str
    gpudra: str
    workload: str
    archives: dict[str, Path]
    """image -> its docker archive."""

    @property
    def gpudra_repository(self) -> str:
        return self.gpudra.rsplit(":", 1)[0]

    @property
    def gpudra_tag(self) -> str:
        return self.gpudra.rsplit(":", 1)[1]


@dataclass(frozen=True)
class NodeRuntime:
    bin: Path
    """containerd, containerd-shim-runc-v2, ctr, crictl."""
    cni: Path
    runc: Path
    images: NodeImages

    @property
    def containerd(self) -> Path:
        return self.bin / "containerd"

    @property
    def ctr(self) -> Path:
        return self.bin / "ctr"

    @property
    def crictl(self) -> Path:
        return self.bin / "crictl"


def find_runtime() -> NodeRuntime:
    """The runtime and images of a real node, or one sentence naming what is missing and the command that
    builds it."""
    built = cache_dir() / "node" / "current"
    wanted = [built / "bin" / b for b in ("containerd", "containerd-shim-runc-v2", "ctr", "crictl")]
    wanted += [built / "cni" / plugin for plugin in CNI_PLUGINS]
    missing = [str(path) for path in wanted if not os.access(path, os.X_OK)]
    if missing:
        raise ConfigurationError(
            f"a real node's container runtime is not built: run `make node` first; missing {', '.join(missing)}"
        )
    runc = shutil.which("runc")
    if runc is None:
        raise ConfigurationError(
            "a real node needs runc on PATH: `make node` installs it (apt-get install runc)"
        )
    return NodeRuntime(bin=built / "bin", cni=built / "cni", runc=Path(runc), images=find_images())


def find_images() -> NodeImages:
    directory = cache_dir() / "node" / "images"
    index = directory / "images.json"
    try:
        listed = json.loads(index.read_text())
        images = NodeImages(
            sandbox=listed["sandbox"],
            gpudra=listed["gpudra"],
            workload=listed["workload"],
            archives={name: directory / entry["archive"] for name, entry in listed["images"].items()},
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(
            f"a real node's images are not built: run `make images` first ({index}: {exc})"
        ) from exc
    missing = [str(path) for path in images.archives.values() if not path.is_file()]
    if missing:
        raise ConfigurationError(
            f"a real node's images are not built: run `make images` first; missing {missing}"
        )
    return images
