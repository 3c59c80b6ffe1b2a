"""The addresses of a cluster's real nodes, and their CNI configuration (pure).

Every real node has a network namespace of its own, joined to the machine by a veth pair: the machine's end
``10.<base>.255.<4i+1>/30``, the node's end ``10.<base>.255.<4i+2>/30`` (the node's IP). Its pods live on the node's
CNI bridge in ``10.<base>.<i>.0/24``, which the machine routes through the node. A cluster takes one ``10.<base>``
/16 that no route or address of the machine overlaps, so that clusters on one machine never meet; every link and
route goes away with the node's namespace, and nothing else on the machine changes. Pods reach the API server at
the machine's address (it answers on every address); pods on two nodes do not reach each other (the machine does
not forward between them).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from gpudra.errors import ConfigurationError

BASES = range(200, 255)
"""The second octets a cluster may take, ``10.200.0.0/16`` to ``10.254.0.0/16``."""
MAX_NODES = 63
"""Node i's link is the /30 at 10.<base>.255.<4i>; 4 * 63 + 2 = 254."""
_NETWORK = re.compile(r"(\d+\.\d+\.\d+\.\d+(?:/\d+)?)")


@dataclass(frozen=True)
class NodeNetwork:
    """Node ``index`` of the cluster whose nodes live in 10.<base>.0.0/16."""

    base: int
    index: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < MAX_NODES:
            raise ConfigurationError(
                f"a cluster has at most {MAX_NODES} real nodes (node index {self.index})"
            )

    @property
    def host_address(self) -> str:
        """The machine's end of the node's link: the node's default gateway."""
        return f"10.{self.base}.255.{4 * self.index + 1}"

    @property
    def node_address(self) -> str:
        """The node's IP (its kubelet's --node-ip)."""
        return f"10.{self.base}.255.{4 * self.index + 2}"

    @property
    def pod_subnet(self) -> str:
        return f"10.{self.base}.{self.index}.0/24"

    @property
    def host_link(self) -> str:
        """The machine's end of the link (at most 15 characters)."""
        return f"gpd{self.base}n{self.index}"


def used_networks(ip_output: str) -> list[ipaddress.IPv4Network]:
    """Every IPv4 network in the text of ``ip -4 route show table all`` and ``ip -4 addr show``."""
    networks = []
    for match in _NETWORK.finditer(ip_output):
        try:
            networks.append(ipaddress.IPv4Network(match.group(1), strict=False))
        except ValueError:
            continue
    return networks


def free_base(ip_output: str, taken: Collection[int] = ()) -> int:
    """The first 10.<base>.0.0/16 of BASES that none of the machine's routes or addresses overlaps (a default
    route overlaps nothing) and that is not in ``taken``."""
    used = [n for n in used_networks(ip_output) if n.prefixlen > 0]
    for base in BASES:
        candidate = ipaddress.IPv4Network(f"10.{base}.0.0/16")
        if base not in taken and not any(candidate.overlaps(n) for n in used):
            return base
    raise ConfigurationError(
        "real nodes need a free 10.x.0.0/16 for their links and pods, and this machine's routes cover every one "
        f"of 10.{BASES.start}.0.0/16 to 10.{BASES.stop - 1}.0.0/16"
    )


def cni_config(network: NodeNetwork, *, ipam_dir: str) -> dict[str, Any]:
    """The node's CNI network: a bridge with the node as the pods' gateway, host-local addresses from its pod
    subnet (kept in ``ipam_dir``), and portmap for hostPort."""
    return {
        "cniVersion": "1.0.0",
        "name": "gpudra",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": ipam_dir,
                    "ranges": [[{"subnet": network.pod_subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
