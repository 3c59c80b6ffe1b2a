"""The prepared-claims checkpoint: what this node prepared, written atomically at every state change.

The kubelet may ask to unprepare a claim after the ResourceClaim is gone and after the agent restarted, so
the agent keeps its own record. The file is a versioned JSON document::

    {"kind": "gpudra.dev/checkpoint", "version": 2, "node": ..., "driver": ...,
     "checksum": "sha256:<hex of the canonical payload>", "payload": {"claims": {<uid>: {...}}}}

Loading tells apart a missing file (empty checkpoint), a corrupt one (not JSON, truncated, wrong shape,
checksum mismatch), a foreign one (other node, driver or kind), one from a newer gpudra (refused), and an
older version (migrated; the old file is kept as ``<file>.v<N>`` so a downgrade finds it). Anything that
cannot be trusted is copied aside to ``<file>.unreadable-<timestamp>`` and the store refuses to write until
the agent calls ``reset()``: a file the agent could not read is never overwritten silently.

Concurrency: prepare and unprepare of different claims run in parallel. Each claim has its own asyncio lock
(``claim_lock``) that the agent holds for the whole operation; file writes are serialized by a short lock
and coalesced (a writer whose change was already written by another one returns at once), and each write encodes
only the entries that changed since the last one (56 claims prepared at once made each write encode all 56).

Layout history: version 1 (the bootstrap layout) stored ``prepared: bool`` and ``devices`` as plain device
names; version 2 has ``state`` and device records; version 3 adds ``vfio_bindings`` (passthrough). Version 3 is
written only while a claim holds a GPU on vfio-pci, version 2 otherwise: an agent of the release before
passthrough then reads the checkpoint of a node that passes nothing through, and refuses one that does as
"written by a newer gpudra" (kept aside, reported) rather than taking its passthrough claims for corrupt.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from gpudra.agent.atomic_files import remove_temp_files, write_atomically
from gpudra.agent.keyedlocks import KeyedLocks
from gpudra.errors import (
    CheckpointChecksumMismatch,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointForeign,
    CheckpointTooNew,
)

KIND = "gpudra.dev/checkpoint"
CURRENT_VERSION = 3
"""The newest layout this agent reads and writes."""
BASE_VERSION = 2
"""The version written while no claim holds a GPU on vfio-pci: the release before passthrough reads it."""

ClaimState = Literal["PrepareStarted", "PrepareCompleted", "UnprepareStarted"]
_ALLOWED_FROM: dict[ClaimState, tuple[ClaimState | None, ...]] = {
    "PrepareStarted": (None, "PrepareStarted", "UnprepareStarted"),
    "PrepareCompleted": (None, "PrepareStarted", "PrepareCompleted"),  # from None: a claim of a CDI spec only
    "UnprepareStarted": ("PrepareStarted", "PrepareCompleted", "UnprepareStarted"),
}


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DeviceRecord(_Record):
    """A prepared device as the kubelet was told about it, plus what undoing it needs."""

    pool_name: str
    device_name: str
    request_names: list[str] = Field(default_factory=list)
    cdi_device_ids: list[str] = Field(default_factory=list)
    share_id: str | None = None
    uuid: str | None = None
    device_type: str | None = None


class MigInstanceRecord(_Record):
    """A MIG instance prepare creates (dynamic MIG); unprepare destroys exactly these. Recorded before the
    instance is created (ids None: only the placement is known) and again once it exists (with its ids)."""

    parent_uuid: str
    profile: str
    placement_start: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    uuid: str | None = None


class VfioBindingRecord(_Record):
    """A GPU prepare moves to vfio-pci for a passthrough device; unprepare gives exactly these back to the
    nvidia driver. Recorded before the move, so a crash in between still gives it back."""

    pci_bus_id: str
    device_name: str


class ClaimEntry(_Record):
    namespace: str
    name: str
    state: ClaimState
    devices: list[DeviceRecord] = Field(default_factory=list)
    cdi_spec: str | None = None
    mig_instances_created: list[MigInstanceRecord] = Field(default_factory=list)
    configs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Device name -> the opaque config applied to it (wire form), to undo sharing settings."""
    cdi_document: dict[str, Any] | None = None
    """The claim's CDI spec document, so that start-up can rewrite it exactly after a reboot wiped /var/run/cdi."""
    vfio_bindings: list[VfioBindingRecord] = Field(default_factory=list)
    updated_at: float = 0.0

    @model_serializer(mode="wrap")
    def _without_unused_vfio(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Left out when empty, so that an agent of the release before passthrough (which forbids unknown
        fields) still reads the checkpoint of a node that passes nothing through (rolling upgrades, rollbacks)."""
        data: dict[str, Any] = handler(self)
        if not data.get("vfio_bindings"):
            data.pop("vfio_bindings", None)
        return data


class Payload(_Record):
    claims: dict[str, ClaimEntry] = Field(default_factory=dict)


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def checksum(payload: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(payload)).hexdigest()


EncodedEntries = dict[str, tuple[ClaimEntry, bytes]]
"""uid -> (an entry, its canonical JSON): what a store keeps between writes, so that a write encodes only the
entries that changed since the last one."""


def encode_checkpoint(
    claims: Mapping[str, ClaimEntry], *, node: str, driver: str, encoded: EncodedEntries | None = None
) -> bytes:
    """The file's bytes: one line, keys sorted, the payload in its canonical form (the bytes its checksum is taken
    of), so that the payload is encoded once. ``encoded``: the entries encoded by earlier calls, reused while an
    entry is the same object (entries are frozen) and brought up to date here."""
    encoded = {} if encoded is None else encoded
    for uid in set(encoded) - set(claims):
        del encoded[uid]
    parts = []
    for uid in sorted(claims):
        entry = claims[uid]
        known = encoded.get(uid)
        if known is None or known[0] is not entry:
            known = encoded[uid] = (entry, canonical_json(entry.model_dump(mode="json")))
        parts.append(canonical_json(uid) + b":" + known[1])
    payload = b'{"claims":{' + b",".join(parts) + b"}}"
    passthrough = any(entry.vfio_bindings for entry in claims.values())
    head = {"driver": driver, "kind": KIND, "node": node}
    return b"".join(
        [
            b'{"checksum":' + canonical_json("sha256:" + hashlib.sha256(payload).hexdigest()),
            *(b"," + canonical_json(key) + b":" + canonical_json(value) for key, value in head.items()),
            b',"payload":' + payload,
            b',"version":' + str(CURRENT_VERSION if passthrough else BASE_VERSION).encode(),
            b"}\n",
        ]
    )


def _migrate_v1(payload: dict[str, Any]) -> dict[str, Any]:
    claims = {}
    for uid, old in payload.get("claims", {}).items():
        claims[uid] = {
            "namespace": old["namespace"],
            "name": old["name"],
            "state": "PrepareCompleted" if old.get("prepared") else "PrepareStarted",
            "devices": [{"pool_name": old.get("pool", ""), "device_name": d} for d in old.get("devices", [])],
            "cdi_spec": old.get("cdi_spec"),
        }
    return {"claims": claims}


def _migrate_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return payload  # version 3 only adds vfio_bindings, empty by default


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _migrate_v1, 2: _migrate_v2}
"""version N -> function turning a version N payload into a version N+1 payload."""


def decode_checkpoint(
    raw: bytes, *, node: str, driver: str, path: str = ""
) -> tuple[dict[str, ClaimEntry], int]:
    """The claims of a checkpoint file and the version it was written in; a CheckpointError when untrusted."""
    where = path or "checkpoint"
    if not raw.strip():
        raise CheckpointCorrupt(f"{where} is empty (truncated write?)", path=path)
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointCorrupt(
            f"{where} is not valid JSON (truncated or damaged): {exc}", path=path
        ) from exc
    if not isinstance(document, dict):
        raise CheckpointCorrupt(f"{where} is not a JSON object", path=path)
    if document.get("kind") != KIND:
        raise CheckpointForeign(f"{where} has kind {document.get('kind')!r}, not {KIND!r}", path=path)
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CheckpointCorrupt(f"{where} has no valid version (got {version!r})", path=path)
    if version > CURRENT_VERSION:
        raise CheckpointTooNew(
            f"{where} was written by a newer gpudra (checkpoint version {version}, this agent reads up to "
            f"{CURRENT_VERSION}); refusing to use or overwrite it",
            path=path,
        )
    for field, expected in (("node", node), ("driver", driver)):
        if document.get(field) != expected:
            raise CheckpointForeign(
                f"{where} belongs to {field} {document.get(field)!r}, not {expected!r}", path=path
            )
    payload = document.get("payload")
    if not isinstance(payload, dict):
        raise CheckpointCorrupt(f"{where} has no payload object", path=path)
    if document.get("checksum") != checksum(payload):
        raise CheckpointChecksumMismatch(
            f"{where} fails its checksum (stored {document.get('checksum')!r}): partially written or edited",
            path=path,
        )
    try:
        for step in range(version, CURRENT_VERSION):
            payload = MIGRATIONS[step](payload)
        claims = Payload.model_validate(payload).claims
    except (KeyError, TypeError, AttributeError, ValidationError) as exc:
        raise CheckpointCorrupt(
            f"{where} (version {version}) has an invalid payload: {exc}", path=path
        ) from exc
    return claims, version


class CheckpointStore:
    """The agent's view of the checkpoint file. ``load()`` once at start, then ``transition``/``remove``."""

    def __init__(self, path: Path, *, node: str, driver: str, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.node = node
        self.driver = driver
        self._clock = clock
        self._claims: dict[str, ClaimEntry] = {}
        self._loaded = False
        self._load_failed = False
        self._claim_locks = KeyedLocks()
        self._write_lock = asyncio.Lock()
        self._generation = 0
        self._written = 0
        self._encoded: EncodedEntries = {}

    # reading ------------------------------------------------------------------------------------------

    async def load(self) -> dict[str, ClaimEntry]:
        """Read the file. Missing: empty. Untrusted: copied aside, CheckpointError raised (see ``reset``)."""
        self._loaded = False
        self._load_failed = False
        try:
            self._claims, version = await asyncio.to_thread(self._read)
        except CheckpointError:
            self._load_failed = True
            raise
        self._loaded = True
        if version < BASE_VERSION:
            await asyncio.to_thread(shutil.copy2, self.path, self._sibling(f".v{version}"))
            await self._persist()
        return dict(self._claims)

    def _read(self) -> tuple[dict[str, ClaimEntry], int]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        remove_temp_files(self.path.parent, self.path.name)
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}, CURRENT_VERSION
        try:
            return decode_checkpoint(raw, node=self.node, driver=self.driver, path=str(self.path))
        except CheckpointError as exc:
            kept = self._sibling(f".unreadable-{int(self._clock())}")
            shutil.copy2(self.path, kept)
            exc.args = (f"{exc.args[0]}; a copy is kept at {kept}",)
            raise

    async def reset(self) -> None:
        """Start from an empty checkpoint after ``load`` failed (the unreadable file was copied aside)."""
        if not self._load_failed:
            raise CheckpointError(f"refusing to reset {self.path}: load() did not fail", path=str(self.path))
        self._load_failed = False
        self._claims = {}
        self._loaded = True
        await self._persist()

    def get(self, uid: str) -> ClaimEntry | None:
        return self._claims.get(uid)

    def claims(self) -> dict[str, ClaimEntry]:
        return dict(self._claims)

    # writing ------------------------------------------------------------------------------------------

    def claim_lock(self, uid: str) -> AbstractAsyncContextManager[None]:
        """Hold for the whole prepare or unprepare of one claim; other claims are not blocked. A claim's lock is
        kept while someone holds or waits for it, not for every claim the node ever prepared."""
        return self._claim_locks.hold(uid)

    async def transition(
        self,
        uid: str,
        state: ClaimState,
        *,
        namespace: str | None = None,
        name: str | None = None,
        devices: Sequence[DeviceRecord] | None = None,
        cdi_spec: str | None = None,
        mig_instances_created: Sequence[MigInstanceRecord] | None = None,
        configs: Mapping[str, Mapping[str, Any]] | None = None,
        cdi_document: Mapping[str, Any] | None = None,
        vfio_bindings: Sequence[VfioBindingRecord] | None = None,
    ) -> ClaimEntry:
        """Move a claim to ``state`` (fields given replace the stored ones) and write the file before
        returning.
        """
        self._require_loaded()
        previous = self._claims.get(uid)
        if (previous.state if previous else None) not in _ALLOWED_FROM[state]:
            raise CheckpointError(
                f"claim {uid}: cannot go from {previous.state if previous else 'unknown'} to {state}",
                path=str(self.path),
            )
        update: dict[str, Any] = {"state": state, "updated_at": self._clock()}
        for key, value in (
            ("namespace", namespace),
            ("name", name),
            ("devices", None if devices is None else list(devices)),
            ("cdi_spec", cdi_spec),
            ("mig_instances_created", None if mig_instances_created is None else list(mig_instances_created)),
            ("configs", None if configs is None else {k: dict(v) for k, v in configs.items()}),
            ("cdi_document", None if cdi_document is None else dict(cdi_document)),
            ("vfio_bindings", None if vfio_bindings is None else list(vfio_bindings)),
        ):
            if value is not None:
                update[key] = value
        if previous is None:
            if namespace is None or name is None:
                raise CheckpointError(f"claim {uid}: namespace and name are needed to record it")
            entry = ClaimEntry.model_validate(update)
        else:
            entry = ClaimEntry.model_validate(previous.model_dump() | update)
        await self._commit(uid, previous, entry)
        return entry

    async def remove(self, uid: str) -> bool:
        """Forget a claim after a completed unprepare; False when it was not recorded."""
        self._require_loaded()
        previous = self._claims.get(uid)
        if previous is None:
            return False
        await self._commit(uid, previous, None)
        return True

    async def _commit(self, uid: str, previous: ClaimEntry | None, entry: ClaimEntry | None) -> None:
        if entry is None:
            self._claims.pop(uid, None)
        else:
            self._claims[uid] = entry
        try:
            await self._persist()
        except BaseException:
            if self._claims.get(uid) is entry:  # undo unless a later change already replaced it
                if previous is None:
                    self._claims.pop(uid, None)
                else:
                    self._claims[uid] = previous
            raise

    async def _persist(self) -> None:
        self._generation += 1
        mine = self._generation
        async with self._write_lock:
            if self._written >= mine:
                return  # another writer already wrote a snapshot that includes this change
            snapshot_generation = self._generation
            data = encode_checkpoint(self._claims, node=self.node, driver=self.driver, encoded=self._encoded)
            await asyncio.to_thread(write_atomically, self.path, data, mode=0o600)
            self._written = snapshot_generation

    def _require_loaded(self) -> None:
        if not self._loaded:
            raise CheckpointError(
                f"checkpoint {self.path} is not loaded (or could not be trusted):"
                " call load() or reset() first",
                path=str(self.path),
            )

    def _sibling(self, suffix: str) -> Path:
        return self.path.with_name(self.path.name + suffix)
