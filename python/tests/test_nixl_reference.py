"""NIXL from the package registry, on every landing: the NIXL-direct
reference (python/bench/nixl_reference.py) on NIXL's wheel moves real bytes
between two agents in two processes over UCX tcp and shared memory, and
``custody bench nixl`` measures it against custody over UCX."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, custody_binary

SCRIPT = REPO_ROOT / "python" / "bench" / "nixl_reference.py"

TLS = {
    "tcp": ["-param", "tls=tcp"],
    # Over shared memory UCX has no peer-failure handling: NIXL must not
    # ask for it.
    "shm": ["-param", "tls=posix,sysv,cma", "-param", "ucx_error_handling_mode=none"],
}


def reference(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs the reference with args."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def result(p: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The k=v fields of the reference's result line."""
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("reference ")]
    assert len(lines) == 1, p.stdout
    return dict(kv.split("=", 1) for kv in lines[0].split()[1:])


@pytest.mark.parametrize("tls", sorted(TLS))
@pytest.mark.parametrize("op", ["write", "read"])
def test_bandwidth_moves_the_bytes(tls: str, op: str) -> None:
    """A bandwidth run checks that its transfers' bytes arrived (the
    reference fails otherwise) and prints its figure."""
    r = result(
        reference("bw", "-size", "65536", "-op", op, "-depth", "8", "-min-time", "20ms", *TLS[tls])
    )
    assert r["size"] == "65536" and r["op"] == op and r["depth"] == "8"
    assert float(r["mibps"]) > 0


@pytest.mark.parametrize("tls", sorted(TLS))
def test_latency(tls: str) -> None:
    """A latency run times at least 100 transfers and orders its
    percentiles."""
    r = result(reference("lat", "-size", "4096", "-min-time", "20ms", *TLS[tls]))
    assert int(r["n"]) >= 100
    assert 0 < int(r["p50_ns"]) <= int(r["p99_ns"])


def test_a_transfer_that_moved_nothing_fails() -> None:
    """check refuses a region whose bytes are not the other side's."""
    spec = importlib.util.spec_from_file_location("nixl_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    class Side:
        map = bytes([mod.INITIATOR_BYTE]) * 16  # READ should have brought TARGET_BYTE

    ini = mod.Initiator.__new__(mod.Initiator)
    ini.reg = Side()
    with pytest.raises(SystemExit, match="READ: byte 0 of 16 did not arrive"):
        ini.check("READ", 16)


def test_version_names_the_wheel_and_its_ucx() -> None:
    p = reference("version")
    assert p.returncode == 0, p.stderr
    assert re.fullmatch(r"nixl \S+ \(nixl_\w+\), UCX \d+\.\d+\.\d+\n", p.stdout), p.stdout


@pytest.mark.parametrize(
    "args,want",
    [
        (["walk"], "usage: nixl_reference.py bw|lat|target|version"),
        (["bw", "-size", "0"], "-size 0 and -depth 1 must fit"),
        (["bw", "-op", "copy"], "invalid choice: 'copy'"),
        (["lat", "-min-time", "soon"], "-min-time 'soon'"),
        (["lat", "-param", "tls"], "parameter 'tls': want k=v"),
    ],
)
def test_bad_arguments_are_refused(args: list[str], want: str) -> None:
    p = reference(*args, timeout=30)
    assert p.returncode != 0
    assert want in p.stderr


def test_bench_nixl_compares_custody_over_ucx_with_nixl_direct(tmp_path: Path) -> None:
    """custody bench nixl, where the NIXL transport was not built, measures
    NIXL direct through the wheel against custody over UCX and prints the
    table, the ratios and the UCX goal line."""
    custody = custody_binary()
    if not (custody.parent / "custody-transport-ucx").exists():
        pytest.fail(f"{custody.parent}/custody-transport-ucx missing: run make build")
    p = subprocess.run(
        [
            str(custody),
            "bench",
            "nixl",
            "--plugin",
            str(tmp_path / "custody-transport-nixl"),  # never built here
            "--nixl-reference",
            str(SCRIPT),
            "--nixl-python",
            sys.executable,
            "--sizes",
            "1048576",
            "--min-time",
            "50ms",
            "--repeat",
            "1",
            "--param",
            "tls=tcp",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "custody over NIXL not measured" in out
    assert re.search(
        r"nixl-direct: \S+ on NIXL's wheel \(nixl \S+ \(nixl_\w+\), UCX [0-9.]+\)", out
    )
    for op in ("write", "read"):
        assert re.search(rf"(?m)^ +1048576 +{op} +64 +- +[1-9]\d* +- +[1-9]\d*$", out), out
        assert re.search(rf"(?m)^ratio way=custody-ucx size=1048576 op={op} value=[0-9.]+$", out)
    assert re.search(
        r"(?m)^goal name=ucx-vs-nixl-bw-ratio-write-1MiB value=[0-9.]+ target=0.95 met=(yes|no)$",
        out,
    )
    assert re.search(r"(?m)^latency way=nixl-direct size=4096 p50_us=[0-9.]+ p99_us=[0-9.]+$", out)
    assert re.search(r"(?m)^latency way=custody-ucx size=4096 p50_us=[0-9.]+ p99_us=[0-9.]+$", out)
