"""The directories the agent writes in, checked before it starts anything: each is a directory it may write in, or
one it may make (its nearest existing parent is). A plugin or registry path that is a file, or a CDI directory on
a read-only mount, used to stop the agent half-started with a Python traceback (``NotADirectoryError``,
``FileExistsError``) or only fail each claim's prepare later; now the agent stops at once with the setting named."""

from __future__ import annotations

import os
from pathlib import Path

from gpudra.config import AgentSettings
from gpudra.errors import ConfigurationError


def agent_directories(settings: AgentSettings) -> list[tuple[str, Path]]:
    """(the setting's environment variable, the directory) for each directory the agent writes in, each once: the
    plugin directory always (the rolling update's instance locks are there), the others when it serves the kubelet
    plugin (a directory that is another setting's default, the state directory, is not named twice)."""
    wanted = [("GPUDRA_PLUGIN_DIR", settings.plugin_path)]
    if settings.serve_kubelet_plugin:
        wanted += [
            ("GPUDRA_REGISTRY_DIR", settings.registry_dir),
            ("GPUDRA_CDI_DIR", settings.cdi_dir),
            ("GPUDRA_STATE_DIR", settings.state_path),
        ]
        if settings.compute_domains != "disabled":
            wanted.append(("GPUDRA_COMPUTE_DOMAIN_PLUGIN_DIR", settings.compute_domain_plugin_path))
    first: dict[Path, str] = {}
    for name, path in wanted:
        first.setdefault(path, name)
    return [(name, path) for path, name in first.items()]


def directory_problem(path: Path) -> str | None:
    """Why the agent cannot write in ``path`` (or make it), or None."""
    existing = path
    while not existing.exists():
        if existing.is_symlink():
            return f"{existing} is a link to nothing"
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory" if existing == path else f"{existing}, on its path, is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == path else f" (to make {path} in it)"
        return f"{existing} is not writable by the agent{made}: a read-only mount, or another owner"
    return None


def check_agent_directories(settings: AgentSettings) -> None:
    """A ConfigurationError naming every directory setting the agent cannot use, with why."""
    problems = [
        f"{variable}: {problem}"
        for variable, path in agent_directories(settings)
        if (problem := directory_problem(path)) is not None
    ]
    if problems:
        raise ConfigurationError("; ".join(problems))
