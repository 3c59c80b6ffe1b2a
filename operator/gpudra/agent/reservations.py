"""DeviceReservations: which claim holds which device of one driver on this node, and the rule that hands a
device to one holder at a time.

Holders are the claims in the checkpoint (prepared, or part way through a prepare or an unprepare) and the
reservations made in memory: a prepare under way holds its devices from its conflict check until it ends, and the
MIG applier holds the devices it is about to destroy or repartition (:meth:`reserve_devices` /
:meth:`release_devices`). Each check and its reservation happen without an await in between, so concurrent
prepares and the applier see each other.

Every release of the applier counts as a repartition: a prepare that read the hardware before one cannot trust
what it read and is refused (the kubelet retries).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager

from gpudra.agent.checkpoint import CheckpointStore
from gpudra.agent.prepareplan import DeviceKey, conflicts
from gpudra.errors import PrepareError


class Reservation:
    """The devices of one prepare, held while it runs."""

    def __init__(self, reservations: DeviceReservations) -> None:
        self._reservations = reservations
        self._repartitions = reservations.repartitions

    def check_not_repartitioned(self) -> None:
        """PrepareError when the MIG applier changed the node's devices since the reservation was made."""
        if self._reservations.repartitions != self._repartitions:
            raise PrepareError(
                "the node's MIG devices were repartitioned while preparing; the kubelet will retry",
                reason="Repartitioned",
            )


class DeviceReservations:
    """Who holds which device. ``shareable`` names devices that allow multiple allocations (never refused)."""

    def __init__(
        self, store: CheckpointStore, *, shareable: Callable[[], Iterable[str]] = lambda: ()
    ) -> None:
        self._store = store
        self._shareable = shareable
        self._reserved: dict[str, set[DeviceKey]] = {}  # holder (a claim UID, or the MIG applier) -> devices
        self._repartitions = 0

    @property
    def repartitions(self) -> int:
        """How many times the MIG applier released devices it may have changed."""
        return self._repartitions

    @contextmanager
    def preparing(self, uid: str, keys: Collection[DeviceKey]) -> Iterator[Reservation]:
        """Hold ``keys`` for the prepare of claim ``uid`` until the block ends; PrepareError (DeviceInUse) when
        another claim or the MIG applier holds one of them."""
        holders: dict[str, Iterable[DeviceKey]] = {
            other: [(d.pool_name, d.device_name) for d in entry.devices]
            for other, entry in self._store.claims().items()
        }
        holders.update(self._reserved)
        problems = conflicts(uid, sorted(keys), holders, shareable=frozenset(self._shareable()))
        if problems:
            raise PrepareError(
                "; ".join(problems) + "; refusing to hand one device to two claims", reason="DeviceInUse"
            )
        self._reserved[uid] = set(keys)
        try:
            yield Reservation(self)
        finally:
            self._reserved.pop(uid, None)

    # -- the MIG applier's side (gpudra.agent.miglayout.applier.DeviceHolders) ------------------------------

    def holders(self) -> dict[DeviceKey, str]:
        """Every device a claim holds or is being prepared with -> the claim ("namespace/name", or the UID
        while its prepare has not reached the checkpoint)."""
        held: dict[DeviceKey, str] = {}
        for holder, keys in self._reserved.items():
            held.update({key: holder for key in keys})
        for entry in self._store.claims().values():
            held.update(
                {(d.pool_name, d.device_name): f"{entry.namespace}/{entry.name}" for d in entry.devices}
            )
        return held

    def reserve_devices(self, holder: str, keys: Collection[DeviceKey]) -> list[str]:
        """Atomically (no await): the claims holding any of ``keys``, or, when none does, reserve them for
        ``holder`` so that prepares of them are refused until :meth:`release_devices`."""
        held = self.holders()
        claims = sorted({held[key] for key in keys if key in held and held[key] != holder})
        if not claims:
            self._reserved[holder] = set(keys)
        return claims

    def release_devices(self, holder: str) -> None:
        """End a reservation; prepares that read the hardware before it re-read it (the kubelet retries)."""
        if self._reserved.pop(holder, None) is not None:
            self._repartitions += 1
