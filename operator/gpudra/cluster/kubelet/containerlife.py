"""How long a simulated container would run, for the stand-in kubelet: pure, no I/O.

No container runs on a simulated node. A container is taken to end only when its command is one whose end is known
without running it: a program from a short list of commands that end by themselves (``echo``, ``true``, ``false``,
``printf``, ``date``, ``env``, ``hostname``, ``nvidia-smi`` without a loop flag, ``exit N``, ``sleep N``), given
directly or as a ``sh -c`` / ``bash -c`` script of such commands joined by ``;``, ``&&``, ``||`` or new lines;
without a command, the args are the command when the image is one known to have no entrypoint (busybox, alpine,
ubuntu, python, nvidia/cuda...). It ends after the sum of its sleeps, with the exit code the shell would
give. Any other command, a script with anything else in it (pipes, loops, substitutions), ``sleep infinity``, or no
command at all (the image's entrypoint, unknown here) runs until the pod is deleted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

_ENDS = {"echo", "true", "printf", "date", "env", "printenv", "hostname", "uname", "id", "whoami", "pwd", ":"}
_SHELLS = {"sh", "bash", "ash", "dash", "zsh"}
_SLEEP = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SPLIT = re.compile(r"(;|&&|\|\||\n)")
_COMPLEX = re.compile(r"[|&<>`$(){}]")  # pipes, background, redirections, substitutions, groups
_PLAIN_IMAGES = {
    "busybox",
    "alpine",
    "ubuntu",
    "debian",
    "fedora",
    "centos",
    "rockylinux",
    "bash",
    "python",
    "cuda",
}
"""Images with no ENTRYPOINT: the container's args are its command (``kubectl run x --image=busybox -- echo hi``)."""


def _no_entrypoint(image: str) -> bool:
    name = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    return name in _PLAIN_IMAGES


@dataclass(frozen=True, slots=True)
class Lifetime:
    """A container that ends after ``seconds`` with ``exit_code``."""

    seconds: float
    exit_code: int


def _step(words: list[str]) -> Lifetime | None:
    """One simple command: how long it runs and its exit code, or None when unknown."""
    if not words:
        return Lifetime(0.0, 0)
    program = words[0].rsplit("/", 1)[-1]
    if program in _ENDS:
        return Lifetime(0.0, 0)
    if program == "false":
        return Lifetime(0.0, 1)
    if program == "exit":
        code = words[1] if len(words) > 1 else "0"
        return Lifetime(0.0, int(code) % 256) if code.isdigit() else None
    if program == "sleep":
        total = 0.0
        for word in words[1:]:
            match = _SLEEP.fullmatch(word)
            if match is None:
                return None  # sleep infinity, a variable...
            total += float(match.group(1)) * _UNIT[match.group(2)]
        return Lifetime(total, 0) if len(words) > 1 else None
    if program == "nvidia-smi":
        looping = any(w in ("-l", "-lms") or w.startswith(("--loop", "-l=")) for w in words[1:])
        return None if looping else Lifetime(0.0, 0)
    return None


def _script(text: str) -> Lifetime | None:
    """A shell script of simple commands joined by ``;``, ``&&``, ``||`` or new lines."""
    parts = _SPLIT.split(text)
    seconds, code, skip = 0.0, 0, False
    for index in range(0, len(parts), 2):
        command = parts[index].strip()
        joiner = parts[index - 1] if index else ";"
        if joiner == "&&":
            skip = code != 0
        elif joiner == "||":
            skip = code == 0
        else:
            skip = False
        if not command:
            continue
        if _COMPLEX.search(command):
            return None
        try:
            words = shlex.split(command)
        except ValueError:
            return None
        step = _step(words)
        if step is None:
            return None
        if skip:
            continue
        seconds += step.seconds
        code = step.exit_code
        if words[0] == "exit":
            break
    return Lifetime(seconds, code)


def container_lifetime(container: dict[str, Any]) -> Lifetime | None:
    """How the container would end, or None when it runs until stopped (see the module's rule)."""
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    if not container.get("command") and not _no_entrypoint(str(container.get("image", ""))):
        return None  # the image's entrypoint runs (with the args): unknown
    if not words:
        return None  # the image's default command: a shell or an unknown program
    if words[0].rsplit("/", 1)[-1] in _SHELLS:
        if len(words) >= 3 and words[1] in ("-c", "-ec", "-ce"):
            return _script(words[2])
        return None
    if any(_COMPLEX.search(w) for w in words[:1]):
        return None
    return _step(words)


def pod_lifetime(pod: dict[str, Any]) -> list[Lifetime] | None:
    """How each of the pod's containers ends, when they all do and the pod is not restarted: restartPolicy
    Never, or OnFailure with every container succeeding. None: the pod runs until deleted (restarts are not
    simulated, so a pod whose containers would be restarted keeps running)."""
    spec = pod.get("spec") or {}
    lifetimes = [container_lifetime(c) for c in spec.get("containers") or []]
    known = [life for life in lifetimes if life is not None]
    if not lifetimes or len(known) < len(lifetimes):
        return None
    policy = spec.get("restartPolicy") or "Always"
    if policy == "Always" or (policy == "OnFailure" and any(life.exit_code for life in known)):
        return None
    return known
