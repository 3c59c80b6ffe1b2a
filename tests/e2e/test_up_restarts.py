"""``gpudra up`` stopped and started again as a user does it (#33): the README's walk-through, Ctrl-C, ``make demo``
again in the same directory, the same pods again; a second ``gpudra up`` in a directory a first one uses; one
killed with SIGKILL and its directory taken over. Ctrl-C stops it quietly, the web view's explain worker included."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clusterkit import eventually
from gpudra.cluster.tempdirs import LOCK_FILE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]


class Up:
    """One ``gpudra up`` as a user runs it in a terminal (a session of its own: a Ctrl-C reaches its group)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.process: asyncio.subprocess.Process | None = None
        self.output: list[str] = []

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    async def start(self, flags: tuple[str, ...] = ("--nodes", "dgx-h100:1", "--web-port", "0")) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpudra", "up", *flags, "--kubeconfig", str(self.kubeconfig),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        while not self.output or "Ctrl-C stops it." not in self.output[-1]:
            line = await asyncio.wait_for(self.process.stdout.readline(), 120)
            assert line, "gpudra up ended before it was up:\n" + "".join(self.output)
            self.output.append(line.decode())

    async def interrupt(self) -> tuple[int, str]:
        """Ctrl-C, as a terminal sends it to the foreground process group; its exit status and all it printed."""
        assert self.process is not None and self.process.stdout is not None
        os.killpg(self.process.pid, signal.SIGINT)
        rest, _ = await asyncio.wait_for(self.process.communicate(), 60)
        return self.process.returncode or 0, "".join(self.output) + rest.decode()

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def kubectl(self, *args: str, stdin: str | None = None) -> str:
        process = await asyncio.create_subprocess_exec(
            "kubectl", *args, env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), 120)
        assert process.returncode == 0, f"kubectl {' '.join(args)}: {out.decode()}"
        return out.decode()


def run_directory_of(pid: int) -> Path:
    """The temporary directory of the gpudra up of ``pid`` (its lock file names it)."""
    (found,) = [
        lock.parent
        for lock in Path(tempfile.gettempdir()).glob(f"gpudra-*/{LOCK_FILE}")
        if lock.read_text().strip() == str(pid)
    ]
    return found


@pytest.fixture
def ups(tmp_path: Path) -> Iterator[Callable[[], Up]]:
    """``ups()`` makes an Up in the test's directory; any still running when the test ends is killed."""
    made: list[Up] = []

    def make() -> Up:
        made.append(Up(tmp_path))
        return made[-1]

    yield make
    for up in made:
        if up.process is not None and up.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(up.process.pid, signal.SIGKILL)


def explain_worker_started(pid: int) -> bool:
    """Whether a process of gpudra up's group is the web view's explain worker (a multiprocessing spawn child)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (
                    os.getpgid(int(entry.name)) == pid
                    and b"multiprocessing" in (entry / "cmdline").read_bytes()
                ):
                    return True
            except (OSError, ProcessLookupError):
                continue
    return False


async def walk_through(up: Up) -> None:
    """The README's walk-through, without its final delete: two GPU pods running, and a claim that waits."""
    await up.kubectl("create", "namespace", "demo")
    await up.kubectl("apply", "-f", str(ROOT / "examples" / "nvidia-smi-pods.yaml"))
    await up.kubectl("apply", "-f", str(ROOT / "examples" / "seeds" / "06-unsatisfiable.yaml"))
    await up.kubectl("wait", "-n", "demo", "--for=condition=Ready", "pod", "--all", "--timeout=90s")


async def test_a_restarted_demo_runs_the_same_pods_again_and_ctrl_c_is_quiet(ups: Callable[[], Up]) -> None:
    first = ups()
    await first.start()
    await walk_through(first)
    assert first.process is not None
    pid = first.process.pid  # the explain worker starts once the web view sees the waiting claim
    await eventually(
        lambda: explain_worker_started(pid), timeout=60, what="the web view's explain worker started"
    )
    code, printed = await first.interrupt()
    assert code == 0, printed
    assert "Traceback" not in printed and "KeyboardInterrupt" not in printed, printed

    again = ups()  # `make demo` again, in the same directory
    await again.start()
    await walk_through(
        again
    )  # before: ContainerCreating for good, "device gpu-0 is already prepared for claim"
    logs = await again.kubectl("logs", "-n", "demo", "-l", "app=smi")
    assert logs.count("GPU 0:") == 2
    code, printed = await again.interrupt()
    assert code == 0 and "Traceback" not in printed, printed


async def test_a_second_up_in_the_same_directory_names_the_first_and_a_dead_ones_is_taken_over(
    ups: Callable[[], Up], tmp_path: Path
) -> None:
    first = ups()
    await first.start()
    assert first.process is not None
    second = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "up", "--nodes", "dgx-h100:1", "--once",
        "--kubeconfig", str(first.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(second.communicate(), 60)
    said = out.decode()
    assert second.returncode == 2, said
    assert (
        f"another gpudra up runs in {tmp_path} (PID {first.process.pid}, API server https://127.0.0.1:"
        in said
    )
    assert "Traceback" not in said
    await first.kubectl("get", "nodes")  # the first one still serves

    # tmp_path is too deep for the node's socket paths: its files are in the run's own temporary directory
    left = run_directory_of(first.process.pid)
    await first.kill()  # it dies without stopping: its lock goes with it
    assert left.exists()
    third = ups()
    await third.start()
    assert f"from a gpudra up that ended without stopping (PID {first.process.pid})" in "".join(third.output)
    assert not left.exists()  # the next run that needed a temporary directory removed the dead one's
    await third.kubectl("get", "nodes")
    code, printed = await third.interrupt()
    assert code == 0, printed


@pytest.mark.parametrize("control_plane", ["embedded", "kubernetes"])
async def test_the_kubeconfig_appears_once_the_cluster_is_usable_and_the_start_is_quiet(
    control_plane: str, ups: Callable[[], Up]
) -> None:
    """A script waits for the kubeconfig, as the README suggests, then finds the nodes and their GPUs; nothing on
    the way warns of a CRD not served yet (429 "storage is (re)initializing", kopf's "Request attempt")."""
    up = ups()
    waiter = asyncio.create_task(up.start(("--control-plane", control_plane, "--nodes", "dgx-h100:2")))
    try:
        await eventually(up.kubeconfig.exists, timeout=180, what="the kubeconfig written")
        nodes = (await up.kubectl("get", "nodes", "-o", "name")).split()
        slices = (await up.kubectl("get", "resourceslices", "-o", "name")).split()
        assert len(nodes) == 2 and len(slices) >= 2, (nodes, slices)
        await waiter
    finally:
        if not waiter.done():
            waiter.cancel()
    code, printed = await up.interrupt()
    assert code == 0, printed
    for noise in ("storage is (re)initializing", "Request attempt", "watch failed", "Traceback"):
        assert noise not in printed, printed
