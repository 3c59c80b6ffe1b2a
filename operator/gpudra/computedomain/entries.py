"""The JSON patches by which an IMEX daemon changes its own entry in a ComputeDomainClique, and nothing else.

Every daemon of a clique writes the same object. Read-modify-write with the resourceVersion read makes any
other daemon's write in between a 409, and the daemons of a clique starting together collide round after round.
Instead each change is a JSON patch (RFC 6902) that the API server applies to the object as it is when the
patch arrives, guarded by ``test`` operations on only what the change depends on; a failed test (422) means
that changed, and the daemon reads again. The sequence, for one node:

1. join: its entry, without an index, is appended (``add /daemons/-``, which needs no test: the server
   appends to the list as it is then);
2. ``own_entry_patch`` then writes the index dealt to it (``index.assign_index``) and the status it reports.
   The deal depends only on which nodes are in the list, in which order, and the indices already held; so the
   patch tests that every entry read is still at its place and every index read is unchanged. Other daemons
   joining (appended after it), taking their own dealt indices or refreshing their status meanwhile leave those
   tests true: only a node leaving (which changes the deal) fails it;
3. later reports (Ready, NotReady) replace the entry where it is, testing only that it is still there;
4. ``release_patch`` removes it, testing the same.

The admission policy (manifests/base/clique-admission.yaml) sees each patch as an UPDATE that changes only the
node's own entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpudra.api.computedomain import ComputeDomainClique, ComputeDomainDaemonInfo
from gpudra.computedomain.index import assign_index, check_clique

JsonPatch = list[dict[str, Any]]


def joining_entry(report: ComputeDomainDaemonInfo) -> ComputeDomainDaemonInfo:
    """The entry a node joins with: no index yet, NotReady until its index is written."""
    return report.model_copy(update={"index": None, "status": "NotReady", "message": None})


def position_of(daemons: Sequence[ComputeDomainDaemonInfo], node_name: str) -> int | None:
    return next((i for i, d in enumerate(daemons) if d.node_name == node_name), None)


def _still_here(position: int, node_name: str) -> dict[str, Any]:
    return {"op": "test", "path": f"/daemons/{position}/nodeName", "value": node_name}


def own_entry_patch(
    clique: ComputeDomainClique, report: ComputeDomainDaemonInfo
) -> tuple[int, JsonPatch] | None:
    """The index of ``report``'s node and the patch that makes its entry say ``report`` (empty: it already
    does); None when the node has no entry (it joins first). Raises CliqueFullError when no index is left
    for it and InvalidInputError when ``report`` is for another clique."""
    check_clique(clique, report)
    daemons = clique.daemons or []
    position = position_of(daemons, report.node_name)
    if position is None:
        return None
    current = daemons[position]
    index = assign_index(daemons, report.node_name, clique_id=report.clique_id)
    wanted = report.model_copy(update={"index": index})
    replace = {"op": "replace", "path": f"/daemons/{position}", "value": wanted.to_wire()}
    if current.index is not None:
        return index, [] if current == wanted else [_still_here(position, report.node_name), replace]
    guards: JsonPatch = []
    for i, daemon in enumerate(daemons):
        guards.append(_still_here(i, daemon.node_name))
        if daemon.index is not None:
            guards.append({"op": "test", "path": f"/daemons/{i}/index", "value": daemon.index})
    return index, [*guards, replace]


def release_patch(clique: ComputeDomainClique, node_name: str) -> JsonPatch | None:
    """The patch that removes the node's entry (None: it has none)."""
    position = position_of(clique.daemons or [], node_name)
    if position is None:
        return None
    return [_still_here(position, node_name), {"op": "remove", "path": f"/daemons/{position}"}]
