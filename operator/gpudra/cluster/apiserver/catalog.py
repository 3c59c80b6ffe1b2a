"""What the embedded API server serves and where it keeps it: the registry of resource types and one store per
storage key; the built-in types from the start, and the types of each CustomResourceDefinition while it exists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .registry import Registry, ResourceType, StoreKey, crd_resource_types
from .store import Clock, Store
from .versions import KubeVersion


class Catalog:
    """``dropped(key, store)`` is called when a store goes with the last type served from it (its watchers are
    closed already; its objects are gone with it)."""

    def __init__(
        self, clock: Clock, dropped: Callable[[StoreKey, Store], None], version: KubeVersion
    ) -> None:
        self.registry = Registry(version)
        self.stores: dict[StoreKey, Store] = {}
        self._clock = clock
        self._dropped = dropped
        for rt in self.registry:
            self._ensure_store(rt)

    def store(self, rt: ResourceType) -> Store:
        return self.stores[rt.storage_key]

    def type_of(self, key: StoreKey) -> ResourceType | None:
        types = self.registry.by_storage(key)
        return types[0] if types else None

    def crd_written(self, crd: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Serve the versions the CRD names now (``old``: as it was before this write, None when created)."""
        wanted = crd_resource_types(crd)
        previous = crd_resource_types(old) if old is not None else []
        if wanted == previous:
            return
        keys_kept = {rt.storage_key for rt in wanted}
        for rt in previous:
            self.registry.remove(rt)
        for rt in previous:
            if rt.storage_key not in keys_kept and not self.registry.by_storage(rt.storage_key):
                self._drop_store(rt.storage_key)
        for rt in wanted:
            self.registry.add(rt)
            self._ensure_store(rt)

    def crd_removed(self, crd: dict[str, Any]) -> None:
        """Stop serving the CRD's types; their objects go with their store."""
        for rt in crd_resource_types(crd):
            self.registry.remove(rt)
            if not self.registry.by_storage(rt.storage_key):
                self._drop_store(rt.storage_key)

    def _ensure_store(self, rt: ResourceType) -> None:
        if rt.storage_key not in self.stores:
            self.stores[rt.storage_key] = Store(rt.indexed_fields, self._clock.value)

    def _drop_store(self, key: StoreKey) -> None:
        store = self.stores.pop(key, None)
        if store is None:
            return
        store.close_watchers()
        self._dropped(key, store)
