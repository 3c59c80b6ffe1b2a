"""Daemon indices within a clique, IMEX channel leases, and which ComputeDomains may share a node.

Hardware facts relied on (NVIDIA IMEX guide, the open GPU kernel module, NVIDIA's DRA driver):

F1. IMEX channels are character devices ``/dev/nvidia-caps-imex-channels/channel<N>``: the major number is
    the ``nvidia-caps-imex-channels`` line of /proc/devices (it differs between nodes), the minor is N. The
    kernel module offers ``ImexChannelCount`` channels (module parameter, 2048 by default): N in 0..2047.
    They exist per node; a process can use a channel only when its device node is in its container.
F2. Memory exported over multi-node NVLink can be imported only by a process holding the SAME channel
    number, on a node of the SAME IMEX domain. Channels are the isolation boundary inside an IMEX domain.
F3. An IMEX domain is the set of nodes whose ``nvidia-imex`` daemons list one another in their node
    configuration; peers address each other by a node index that must be unique and the same on every
    peer. One NVLink clique (e.g. a GB200 NVL72 rack) holds at most 18 nodes (compute trays), so an index
    below 18 identifies a daemon within its clique. Nodes of different cliques share no NVLink.
F4. ``nvidia-imex`` drives the node's fabric memory through one node-wide capability
    (/proc/driver/nvidia/capabilities/fabric-imex-mgmt): a node runs ONE IMEX daemon and belongs to ONE
    IMEX domain at a time. This, not the node label, is what ties NVIDIA's driver to one ComputeDomain per
    node: each of its domains brings its own daemon, i.e. its own IMEX domain.

The model gpudra follows:

- Indices. Per (domain, clique) the daemons register with the lowest free index in 0..17, in the order
  they joined (``assign_index``: each appends its entry, then takes the index dealt to it); a node that is
  registered keeps its index for as long as its entry exists, whatever its status (a restarting daemon or
  a flapping fabric comes back under the same index, so its peers' configuration stays valid). The entry,
  and with it the index, is removed only once the node is gone from the domain: the daemon deregistered,
  or the controller saw the Node object deleted or the domain's daemon pod on it gone
  (``release_departed``). A 19th node gets a CliqueFullError naming the clique and the nodes holding it.
- daemonset mode (NVIDIA's): each domain runs its own daemon on its nodes, so by F4 a node serves one such
  domain at a time. A second domain's channel on that node is refused with a retryable message naming the
  domain that holds it (gpudra's per-domain node labels mean the second domain no longer evicts the
  first one's daemon). The domain owns its IMEX domain, so Single uses channel 0 and All every channel.
- host-managed mode: one daemon per node serves the clique-wide IMEX domain for every ComputeDomain of the
  clique, so several domains share nodes. By F2 they must differ by channel: each domain leases one channel
  number per clique (the same on all its nodes there, the lowest free one), and a domain in All mode would
  reach every other domain's memory, so it leases all channels and shares its clique with no other domain.
  At most 2048 Single domains per clique.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gpudra.api.computedomain import AllocationMode, ComputeDomainClique, ComputeDomainDaemonInfo
from gpudra.computedomain.names import DaemonMode
from gpudra.errors import CliqueFullError, ComputeDomainPlacementError, InvalidInputError

MAX_NODES_PER_CLIQUE: Final = 18
IMEX_CHANNEL_COUNT: Final = 2048


# ---------------------------------------------------------------- daemon indices


def assign_index(daemons: Sequence[ComputeDomainDaemonInfo], node_name: str, *, clique_id: str) -> int:
    """The index of ``node_name`` in the clique: its current one if it has one; else the one dealt to it.

    Entries without an index are nodes that joined and wait for theirs (a daemon appends its entry first,
    then writes its index). The indices below 18 that no entry holds are dealt, lowest first, to the waiting
    entries in list order, i.e. in the order they joined: the k-th waiting node gets the k-th lowest free
    index. A node that takes its dealt index leaves the deal without changing anyone else's share, and a
    node joining later is dealt after all of them, so the daemons of a clique joining together compute the
    same answers from whatever state they read, and each writes its own index once, without colliding.
    Joining one after another this is the lowest free index, NVIDIA's rule.
    """
    waiting: list[str] = []
    taken: dict[int, str] = {}
    for daemon in daemons:
        if daemon.index is None:
            waiting.append(daemon.node_name)
        elif daemon.node_name == node_name:
            return daemon.index
        else:
            taken[daemon.index] = daemon.node_name
    free = [index for index in range(MAX_NODES_PER_CLIQUE) if index not in taken]
    rank = waiting.index(node_name) if node_name in waiting else len(waiting)
    if rank < len(free):
        return free[rank]
    holders = ", ".join(taken[i] for i in sorted(taken))
    if free:
        ahead = ", ".join(waiting[: len(free)])
        why = (
            f"{len(taken)} daemon indices are taken ({holders}) and the other {len(free)} go to {ahead}, "
            "which joined before it"
        )
    else:
        why = f"all {MAX_NODES_PER_CLIQUE} daemon indices are taken ({holders})"
    raise CliqueFullError(
        f"node {node_name} cannot join clique {clique_id or '(none)'}: {why}; an IMEX domain spans at most "
        f"{MAX_NODES_PER_CLIQUE} nodes of one clique, and an index is freed only when its node has left the domain"
    )


def check_clique(clique: ComputeDomainClique, report: ComputeDomainDaemonInfo) -> None:
    """Raise InvalidInputError when ``report`` is for another clique than the object's name says."""
    name = clique.metadata.name or ""
    expected = name.split(".", 1)[1] if "." in name else None  # "<domain uid>.<cliqueID>"
    if expected is not None and report.clique_id != expected:
        raise InvalidInputError(
            f"the daemon of node {report.node_name} reports clique {report.clique_id!r} but registers in "
            f"the object of clique {expected!r}; a node that changed clique must leave the old one first"
        )


def release_departed(clique: ComputeDomainClique, present_nodes: Collection[str]) -> ComputeDomainClique:
    """The clique without the daemons of nodes that left the domain; their indices become free.

    ``present_nodes``: the nodes still in the domain, i.e. whose Node object exists AND whose daemon pod
    for this domain still exists. A NotReady daemon is present: it keeps its index.
    """
    kept = [d for d in clique.daemons or [] if d.node_name in present_nodes]
    return clique.model_copy(update={"daemons": kept})


# ---------------------------------------------------------------- domains sharing nodes and channels


@dataclass(frozen=True, slots=True)
class DomainRef:
    """A ComputeDomain as the placement rules see it."""

    uid: str
    display: str
    """``<namespace>/<name>`` for messages."""
    allocation_mode: AllocationMode = "Single"


@dataclass(frozen=True, slots=True)
class ChannelLease:
    """The IMEX channels a domain's workloads get in one clique: ``first`` .. ``first + count - 1``."""

    first: int
    count: int = 1

    @property
    def ids(self) -> range:
        return range(self.first, self.first + self.count)


def check_node_admits(
    node_name: str, joining: DomainRef, on_node: Sequence[DomainRef], mode: DaemonMode
) -> None:
    """Raise ComputeDomainPlacementError when ``node_name`` cannot serve ``joining`` beside the domains
    ``on_node`` (those with prepared channels or daemons there). In host-managed mode nodes are shared and
    the clique-wide check is ``assign_channels``."""
    others = [d for d in on_node if d.uid != joining.uid]
    if mode != "daemonset" or not others:
        return
    holders = ", ".join(sorted(d.display for d in others))
    raise ComputeDomainPlacementError(
        f"node {node_name} cannot join ComputeDomain {joining.display}: it already runs the IMEX daemon of "
        f"ComputeDomain {holders}, and a node runs one IMEX daemon, which in daemonset mode serves one "
        "ComputeDomain; the channel is prepared once that domain's workloads have left the node (run the "
        "IMEX daemons host-managed to let several domains share nodes)"
    )


def assign_channels(
    joining: DomainRef,
    leases: Mapping[str, tuple[DomainRef, ChannelLease]],
    mode: DaemonMode,
    *,
    clique_id: str,
    channel_count: int = IMEX_CHANNEL_COUNT,
) -> ChannelLease:
    """The channels of ``joining`` in one clique, given the leases of the domains already there (by UID).

    daemonset mode: the domain owns its IMEX domain, so Single is channel 0 and All is every channel.
    host-managed mode: a known domain keeps its lease; Single takes the lowest free channel; All needs the
    clique to itself, and no domain joins a clique held by an All domain.
    """
    everything = ChannelLease(0, channel_count)
    if mode == "daemonset":
        return everything if joining.allocation_mode == "All" else ChannelLease(0)
    if joining.uid in leases:
        return leases[joining.uid][1]
    others = {uid: held for uid, held in leases.items() if uid != joining.uid}
    where = f"clique {clique_id or '(none)'}"
    for domain, lease in others.values():
        if lease.count > 1 or domain.allocation_mode == "All":
            raise ComputeDomainPlacementError(
                f"ComputeDomain {joining.display} cannot use {where}: ComputeDomain {domain.display} holds "
                "every IMEX channel there (allocationMode All), and sharing a channel would let each domain "
                "read the other's memory; it can join once that domain has left the clique"
            )
    if joining.allocation_mode == "All" and others:
        names = ", ".join(sorted(domain.display for domain, _ in others.values()))
        raise ComputeDomainPlacementError(
            f"ComputeDomain {joining.display} (allocationMode All) needs every IMEX channel of {where}, "
            f"but {names} already use channels there; it can join once they have left, or use "
            "allocationMode Single"
        )
    if joining.allocation_mode == "All":
        return everything
    used = {channel for _, lease in others.values() for channel in lease.ids}
    for channel in range(channel_count):
        if channel not in used:
            return ChannelLease(channel)
    raise ComputeDomainPlacementError(
        f"ComputeDomain {joining.display} cannot use {where}: all {channel_count} IMEX channels are leased "
        "to other ComputeDomains (one channel per domain per clique)"
    )
