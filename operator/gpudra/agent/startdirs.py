"""The directories the agent writes in, checked before it starts anything: each is a directory it may write in, or
one it may make (its nearest existing parent is). A plugin or registry path that is a file, or a CDI directory on
a read-only mount, used to stop the agent half-started with a Python traceback (``NotADirectoryError``,
``FileExistsError``) or only fail each claim's prepare later; now the agent stops at once with the setting named."""

from __future__ import annotations

from pathlib import Path

from gpudra.config import AgentSettings
from gpudra.errors import ConfigurationError
from gpudra.writable import directory_problem


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


def check_agent_directories(settings: AgentSettings) -> None:
    """A ConfigurationError naming every directory setting the agent cannot use, with why."""
    problems = [
        f"{variable}: {problem}"
        for variable, path in agent_directories(settings)
        if (problem := directory_problem(path)) is not None
    ]
    if problems:
        raise ConfigurationError("; ".join(problems))
