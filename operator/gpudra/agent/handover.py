"""Which of a node's agent instances is active: the hand-over between the old and the new agent of a rolling update.

With ``maxSurge: 1, maxUnavailable: 0`` the DaemonSet starts the new agent pod beside the old one and deletes the
old one only once the new one is ready. Both serve the kubelet's DRA socket (each its own, see
:mod:`gpudra.agent.kubeletplugin.plugin`), but only one instance at a time is *active*: prepares and unprepares,
publishes the slices, applies MigLayouts, serves the compute-domain driver. The active one holds an exclusive
``flock`` on ``<state dir>/agent-active.lock`` (a lock the kernel drops when the process dies, however it dies).

The hand-over, all through files in the state directory the two instances share:

1. The new instance holds ``agent-instances/<id>.lock`` for its lifetime (so others can tell it is alive), writes
   its id to ``agent-takeover`` and waits for the active lock.
2. The active instance sees the request (it looks every ``poll`` seconds), stops starting operations, waits for
   the ones in flight (a prepare, an unprepare, a MIG step: :meth:`ActiveRole.operation`), stops its active duties
   and releases the lock. From then on it answers new operations with :class:`HandedOver` (the kubelet calls the
   newest plugin, so these are rare).
3. The new instance gets the lock, reloads the checkpoint and the CDI directory (:mod:`gpudra.agent.recovery`),
   then lets operations through (:meth:`ActiveRole.open`) and starts its duties; operations that reached it
   meanwhile waited and now run, exactly once.

If the instance that asked dies before it got the lock (a rollout aborted), the old one takes the lock back.
Without another instance this is one flock taken at start.

The locks are :class:`FileLocks` (``flock``, one descriptor each) for every agent of a real node. The simulated
nodes whose agents all run in the ``gpudra up`` process share one :class:`ProcessLocks` instead: no other process
uses their state directories, and a fleet of thousands of nodes would otherwise spend two of the process's open
files a node on them (issue #38).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Protocol

from gpudra.agent.atomic_files import write_atomically
from gpudra.agent.callsinflight import CallsInFlight
from gpudra.agent.kubeletplugin.messages import ClaimRef, PluginHandler, PrepareResult, UnprepareResult
from gpudra.errors import GpudraError
from gpudra.telemetry import get_logger

log = get_logger(__name__)
ACTIVE_LOCK = "agent-active.lock"
TAKEOVER = "agent-takeover"
INSTANCES = "agent-instances"


class HandedOver(GpudraError):
    """This instance handed the node over to a newer agent; the operation belongs to that one."""


Release = Callable[[], None]


class HandoverLocks(Protocol):
    """Non-blocking locks on the state directory's files, with ``flock``'s meaning: one exclusive holder, or any
    number of shared ones."""

    def try_lock(self, path: Path, kind: int) -> Release | None:
        """Hold ``kind`` (LOCK_EX or LOCK_SH) on ``path`` (created if missing): what gives it up, or None when
        another holder has it."""
        ...


class FileLocks:
    """``flock`` on the files: the kernel drops a lock when its process dies, however it dies."""

    def try_lock(self, path: Path, kind: int) -> Release | None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return lambda: _unlock(fd)


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


class ProcessLocks:
    """The same locks among the holders of one process, kept in memory: no descriptor stays open. Only for state
    directories no other process uses (a process's death drops them as it drops a flock)."""

    def __init__(self) -> None:
        self._held: dict[Path, tuple[int, int]] = {}
        """path: (kind, number of holders)"""

    def try_lock(self, path: Path, kind: int) -> Release | None:
        path.touch(mode=0o600)  # the file exists while locked, as with flock
        held = self._held.get(path)
        if held is not None and (kind == fcntl.LOCK_EX or held[0] == fcntl.LOCK_EX):
            return None
        self._held[path] = (kind, held[1] + 1 if held is not None else 1)
        return lambda: self._release(path)

    def _release(self, path: Path) -> None:
        kind, holders = self._held.pop(path)
        if holders > 1:
            self._held[path] = (kind, holders - 1)


class ActiveRole:
    """One agent instance's part in the hand-over. ``instance`` names it (the pod UID in a DaemonSet)."""

    def __init__(
        self, state_dir: Path, instance: str = "", *, poll: float = 0.2, locks: HandoverLocks | None = None
    ) -> None:
        self.state_dir = state_dir
        self._locks = locks if locks is not None else FileLocks()
        self.instance = instance or uuid.uuid4().hex
        self.poll = poll
        self._active_lock: Release | None = None
        self._alive_lock: Release | None = None
        self._operations = CallsInFlight()
        self.active = asyncio.Event()
        """Set while this instance is active and ready (it holds the lock and has reloaded the node's state):
        operations run."""
        self.yielding = asyncio.Event()
        """Set when a newer instance asked for the node: the duties stop."""
        self.handed_to = ""

    @property
    def _instances(self) -> Path:
        return self.state_dir / INSTANCES

    def _alive(self, instance: str) -> bool:
        """Whether the instance holds its lifetime lock (it is running)."""
        if instance == self.instance:
            return True
        path = self._instances / f"{instance}.lock"
        if not path.exists():
            return False
        probe = self._locks.try_lock(path, fcntl.LOCK_SH)
        if probe is None:
            return True
        probe()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead instance's file
        return False

    def _requester(self) -> str:
        try:
            return (self.state_dir / TAKEOVER).read_text().strip()
        except FileNotFoundError:
            return ""

    def start(self) -> None:
        """Announce this instance (its lifetime lock)."""
        self._instances.mkdir(parents=True, exist_ok=True)
        self._alive_lock = self._locks.try_lock(self._instances / f"{self.instance}.lock", fcntl.LOCK_EX)
        if self._alive_lock is None:
            raise GpudraError(f"another agent runs as instance {self.instance!r} on this node")

    async def acquire(self) -> None:
        """Ask for the node and wait until this instance is active."""
        write_atomically(self.state_dir / TAKEOVER, self.instance.encode())
        log.info("asking for the node's active role", instance=self.instance)
        while True:
            self._active_lock = self._locks.try_lock(self.state_dir / ACTIVE_LOCK, fcntl.LOCK_EX)
            if self._active_lock is not None:
                break
            await asyncio.sleep(self.poll / 2)
        self.handed_to = ""
        self.yielding.clear()
        log.info("this agent instance is active on the node", instance=self.instance)

    def open(self) -> None:
        """Let operations run (after the active instance reloaded the checkpoint and the CDI directory)."""
        self.active.set()

    async def hold(self) -> None:
        """While active: watch for a newer instance asking; then drain, release, and return. A look that fails (the
        process out of open files, a broken state directory) keeps the node: only an instance that asked, and is
        alive, takes it."""
        failing = False
        while True:
            try:
                requester = self._requester()
                if requester and requester != self.instance and self._alive(requester):
                    break
                failing = False
            except OSError as exc:
                if not failing:
                    log.warning(
                        "could not look for a newer agent instance asking for the node; keeping it",
                        error=str(exc),
                    )
                failing = True
            await asyncio.sleep(self.poll)
        log.info("a newer agent instance asks for the node; handing over", to=requester)
        self.handed_to = requester
        self.yielding.set()
        await self._operations.none()

    async def drain(self) -> None:
        """Stop letting operations start and wait for those in flight (before giving the lock up on the way out)."""
        self.yielding.set()
        await self._operations.none()

    def release(self) -> None:
        """Give the active lock up (after the duties stopped)."""
        self.active.clear()
        if self._active_lock is not None:
            self._active_lock()
            self._active_lock = None

    async def wait_orphaned(self) -> None:
        """While handed over: return when the instance this one handed over to died without becoming active."""
        while True:
            await asyncio.sleep(self.poll)
            if not self._alive(self.handed_to):
                log.warning(
                    "the agent instance that asked for the node is gone; taking it back", was=self.handed_to
                )
                return

    @contextlib.asynccontextmanager
    async def operation(self) -> AsyncIterator[None]:
        """Hold for one prepare, unprepare or MIG step: it waits while this instance is not active yet, and is
        refused with HandedOver once the node went to a newer instance."""
        while not self.active.is_set() or self.yielding.is_set():
            if self.handed_to and self._alive(self.handed_to):
                raise HandedOver(
                    f"this agent instance handed the node over to a newer one ({self.handed_to});"
                    " the kubelet retries with it"
                )
            await asyncio.sleep(self.poll / 2)
        with self._operations.one():
            yield

    def stop(self) -> None:
        self.release()
        if self._alive_lock is not None:
            self._alive_lock()
            self._alive_lock = None
            with contextlib.suppress(FileNotFoundError):
                (self._instances / f"{self.instance}.lock").unlink()


class GatedHandler:
    """A PluginHandler whose calls are operations of the role: they wait while the instance is not active yet,
    and are answered with a per-claim error (the kubelet retries, with the newest plugin) once it handed over."""

    def __init__(self, handler: PluginHandler, role: ActiveRole) -> None:
        self._handler = handler
        self._role = role

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        try:
            async with self._role.operation():
                return await self._handler.prepare(claims)
        except HandedOver as exc:
            return {ref.uid: PrepareResult(error=str(exc)) for ref in claims}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        try:
            async with self._role.operation():
                return await self._handler.unprepare(claims)
        except HandedOver as exc:
            return {ref.uid: UnprepareResult(error=str(exc)) for ref in claims}
