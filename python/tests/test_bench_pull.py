"""python/bench/pull.py, run as a user runs it: its side-by-side mode
prints both clients' figures and the goal line, from numbers it measured."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT


def test_against_go_prints_both_clients_and_the_goal(custody_bin: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "python" / "bench" / "pull.py"),
            f"--custody={custody_bin}",
            "--against-go",
            "--rounds=2",
            "--pulls=20",
            "--warmup=2",
            "--concurrency=0",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    rounds = re.findall(
        r"^round \d: py p50 ([0-9.]+)us cpu/pull ([0-9.]+)us  "
        r"go p50 ([0-9.]+)us cpu/pull ([0-9.]+)us  ratio ([0-9.]+)$",
        out,
        re.MULTILINE,
    )
    assert len(rounds) == 2, out
    for r in rounds:
        py, py_cpu, go, go_cpu, ratio = map(float, r)
        assert py > 0 and py_cpu > 0 and go > 0 and go_cpu > 0, out
        assert abs(ratio - py / go) < 0.01, out
    # Each side's Read call is a part of its pull: positive, at most the
    # pull's median, and the rest is what the pull took besides it.
    reads = re.search(
        r"^median Read call p50: py ([0-9.]+)us  go ([0-9.]+)us  ratio ([0-9.]+); "
        r"the rest of the pull \(to the report\): py (-?[0-9.]+)us  go (-?[0-9.]+)us$",
        out,
        re.MULTILINE,
    )
    medians = re.search(
        r"^median p50 of 2 rounds: py ([0-9.]+)us  go \(bench e2e\) ([0-9.]+)us$", out, re.MULTILINE
    )
    assert reads is not None and medians is not None, out
    py_read, go_read, read_ratio, py_rest, go_rest = map(float, reads.groups())
    py_pull, go_pull = map(float, medians.groups())
    assert 0 < py_read <= py_pull and 0 < go_read <= go_pull, out
    assert abs(read_ratio - py_read / go_read) < 0.01, out
    assert abs(py_rest - (py_pull - py_read)) < 0.2 and abs(go_rest - (go_pull - go_read)) < 0.2, (
        out
    )
    goal = re.search(
        r"^goal name=py-pull-vs-go value=([0-9.]+) target=1\.50 met=(yes|no)$", out, re.MULTILINE
    )
    assert goal is not None, out
    assert (goal.group(2) == "yes") == (float(goal.group(1)) <= 1.5), out
