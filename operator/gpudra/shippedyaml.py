"""The YAML gpudra ships (its GPU catalog, the simulated node profiles, its manifests), parsed with libyaml's safe
loader where PyYAML was built with it, else PyYAML's own. The pure-Python loader takes about 0.1 s of CPU for the
catalog alone, which every gpudra process pays at its start (the agent, on every GPU node); libyaml, a seventh of
that. Files users write (fleet files, kubeconfigs, claims to explain) keep PyYAML's own loader: gpudra's
messages about them quote its errors, line and column."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> Any:
    """One document of shipped YAML."""
    return yaml.load(text, Loader=SAFE_LOADER)


def load_all(text: str) -> Iterator[Any]:
    """Every document of a shipped multi-document YAML text."""
    return yaml.load_all(text, Loader=SAFE_LOADER)
