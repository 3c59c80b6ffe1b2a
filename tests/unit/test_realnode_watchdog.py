"""The real nodes' watchdog: once the process that started the nodes is gone, it ends them and removes their
temporary directories (containerd's store, about 1 GB a node), never one with something mounted in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpudra.cluster.realnode.watchdog import directories_named, encode_directory
from gpudra.cluster.tempdirs import mount_points, mounted_within

MOUNTINFO = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "98 22 0:50 / /tmp/gpudra-ab\\040c/node/run rw - tmpfs tmpfs rw\n"
    "99 22 0:51 / /tmp/gpudra-abd rw - tmpfs tmpfs rw\n"
)


def test_a_cut_off_name_on_the_pipe_is_left_out() -> None:
    data = encode_directory(Path("/tmp/gpudra-a")) + encode_directory(Path("/tmp/gpudra-b")) + b"/tmp/gpud"
    assert directories_named(data) == [Path("/tmp/gpudra-a"), Path("/tmp/gpudra-b")]


def test_a_mount_inside_a_directory_is_found_under_the_kernels_escapes() -> None:
    points = mount_points(MOUNTINFO)
    assert Path("/tmp/gpudra-ab c/node/run") in points
    assert mounted_within(Path("/tmp/gpudra-ab c"), points) == [Path("/tmp/gpudra-ab c/node/run")]
    assert mounted_within(Path("/tmp/gpudra-ab"), points) == []  # a name that only begins the same
    assert mounted_within(Path("/tmp/gpudra-abd"), points) == [Path("/tmp/gpudra-abd")]


def test_the_directories_named_are_removed_when_the_pipe_closes(tmp_path: Path) -> None:
    kept, first, second = tmp_path / "kept", tmp_path / "gpudra-1", tmp_path / "gpudra-2"
    for directory in (kept, first / "node" / "containerd", second):
        directory.mkdir(parents=True)
    (first / "node" / "containerd" / "blob").write_bytes(b"x" * 1024)
    watchdog = subprocess.run(
        [sys.executable, "-m", "gpudra.cluster.realnode.watchdog", f"test-{tmp_path.name}", "no-such-node"],
        input=encode_directory(first) + encode_directory(second),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert watchdog.returncode == 0, watchdog.stderr.decode()
    assert not first.exists() and not second.exists()
    assert kept.exists()
