"""Pulls through two custody hosts driven from Python, for comparison with
``bin/custody bench e2e`` (internal/bench/e2e.go), which measures the same
with the Go client.

A pull is ExpectSend of one block on prefill, then Read of it into a block of
decode (notify_producer), timed from Read until the request's finished report
arrives on decode's watch_finished; the producer's finished report is awaited
before the next pull. Both hosts run the fake transport with fence=initiated
(as bench e2e's default) in /dev/shm. The run: --warmup pulls, then --pulls
sequential ones (latency p50/p99 and their rate), then --concurrency pulls
kept in flight for --duration seconds (pulls per second), as bench e2e.

With --against-go, each of --rounds rounds runs ``custody bench e2e`` (the
same pull from the Go client, its own pair of hosts) and then this bench,
alternating, and the last lines give both medians of the rounds' p50, their
ratio, and a goal line: the Python pull within 1.5 times the Go one.

    .venv/bin/python python/bench/pull.py [--pulls 200] [--concurrency 64]
    .venv/bin/python python/bench/pull.py --against-go --rounds 5 --concurrency 0
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import Pair, custody_binary, start_pair

from custody import Client, Finished, Part, Unavailable, new_token


class Reports:
    """One host's finished reports, from a watch in a thread, handed to
    whoever expects each request: its outcome, "" for success or the
    failure's reason."""

    def __init__(self, client: Client) -> None:
        self._mu = threading.Lock()
        self._waiters: dict[str, tuple[threading.Event, list[str]]] = {}
        self._early: dict[str, str] = {}
        self._stop = threading.Event()
        self._watch = client.watch_finished(stop=self._stop)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for f in self._watch:
            self._deliver(f)

    def _deliver(self, f: Finished) -> None:
        failed = {x.request: x.reason or "failed" for x in f.failed}
        with self._mu:
            for rid in [*f.finished_sending, *f.finished_recving, *failed]:
                reason = failed.pop(rid, "")
                w = self._waiters.pop(rid, None)
                if w is None:
                    self._early[rid] = reason
                else:
                    w[1].append(reason)
                    w[0].set()

    def expect(self, rid: str) -> tuple[threading.Event, list[str]]:
        """An event set once rid is reported, and the list its outcome goes
        to; call before the request starts."""
        ev, out = threading.Event(), []
        with self._mu:
            if rid in self._early:
                out.append(self._early.pop(rid))
                ev.set()
            else:
                self._waiters[rid] = (ev, out)
        return ev, out

    def stop(self) -> None:
        """Ends the watch and its thread."""
        self._stop.set()
        self._thread.join(10)


class Bench:
    """The pair and its two watches; worker w pulls prefill block src[w]
    into decode block dst[w]."""

    def __init__(self, pair: Pair, workers: int) -> None:
        self.pair = pair
        self.pw, self.dw = Reports(pair.prefill.api), Reports(pair.decode.api)
        self.src = pair.prefill.api.alloc(pair.prefill.pool, workers)
        self.dst = pair.decode.api.alloc(pair.decode.pool, workers)
        self._seq = itertools.count(1)

    def pull(self, prefix: str, w: int) -> tuple[float, float]:
        """One pull with worker w's blocks: seconds from Read to decode's
        report, and from Read until the call returned (its share of it).
        Returns once prefill's report arrived too."""
        rid = f"{prefix}-{next(self._seq)}"
        sent, recv = self.pw.expect(rid), self.dw.expect(rid)
        p, d = self.pair.prefill, self.pair.decode
        token = new_token()
        p.api.expect_send(rid, token, "", p.pool, self.src[w : w + 1], 1, 60.0)
        part = [Part(d.pool, self.dst[w : w + 1], 0, self.src[w : w + 1])]
        while True:
            start = time.perf_counter()
            try:
                d.api.read(rid, token, "prefill", True, part)
                read = time.perf_counter() - start
                break
            except Unavailable:  # the peer's handshake runs
                time.sleep(0.001)
        took = 0.0
        for i, (ev, out) in enumerate((recv, sent)):
            if not ev.wait(30):
                raise RuntimeError(f"{rid}: no finished report within 30 s")
            if i == 0:
                took = time.perf_counter() - start
            if out[0]:
                raise RuntimeError(f"{rid} failed: {out[0]}")
        return took, read

    def sequential(self, prefix: str, n: int) -> tuple[list[float], list[float], float, float]:
        """n pulls one after another: their latencies, their Read calls'
        (as pull), the seconds all took, and this process's CPU seconds
        (every thread) per pull."""
        t0, c0 = time.perf_counter(), time.process_time()
        out = [self.pull(prefix, 0) for _ in range(n)]
        el, cpu = time.perf_counter() - t0, (time.process_time() - c0) / n
        return [x[0] for x in out], [x[1] for x in out], el, cpu

    def concurrent(self, n: int, seconds: float) -> float:
        """n pulls kept in flight for seconds: pulls per second."""
        done = [0] * n
        errors: list[BaseException] = []
        start = time.perf_counter()
        deadline = start + seconds

        def worker(w: int) -> None:
            try:
                while time.perf_counter() < deadline:
                    self.pull("conc", w)
                    done[w] += 1
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        el = time.perf_counter() - start
        if errors:
            raise errors[0]
        return sum(done) / el

    def stop(self) -> None:
        """Ends both watches."""
        self.pw.stop()
        self.dw.stop()


def pct(xs: list[float], p: int) -> float:
    """The p-th percentile of xs (nearest rank, as bench e2e)."""
    s = sorted(xs)
    i = (len(s) * p + 99) // 100
    return s[max(0, min(len(s) - 1, i - 1))]


def us(seconds: float) -> str:
    """seconds in microseconds, as bench e2e prints them."""
    return f"{seconds * 1e6:.1f}us"


GOAL_RATIO = 1.5
"""The Python pull's p50 may be at most this times the Go client's."""


def go_pull(custody: Path, pulls: int, block_size: int, fence: str) -> tuple[float, float, float]:
    """The p50 of ``custody bench e2e``'s sequential pulls, the CPU its
    engine side (the Go client's process) spent per pull, and the p50 of
    the pulls' Read calls, in seconds."""
    out = subprocess.run(
        [
            str(custody),
            "bench",
            "e2e",
            f"--pulls={pulls}",
            f"--block-size={block_size}",
            f"--param=fence={fence}",
            "--concurrency=1",
            "--duration=100ms",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    m = re.search(r"^e2e pull latency\s+p50 ([0-9.]+)us", out, re.MULTILINE)
    c = re.search(r"^\s+engine side \(this process\)\s+([0-9.]+)us", out, re.MULTILINE)
    r = re.search(r"^e2e read call\s+p50 ([0-9.]+)us", out, re.MULTILINE)
    if m is None or c is None or r is None:
        raise RuntimeError(
            f"custody bench e2e printed no pull latency, Read call or engine-side CPU:\n{out}"
        )
    return float(m.group(1)) / 1e6, float(c.group(1)) / 1e6, float(r.group(1)) / 1e6


def run(a: argparse.Namespace) -> tuple[list[float], list[float], float, float, float]:
    """One round on a new pair of hosts: the sequential pulls' latencies,
    their Read calls', the seconds they took, the CPU per pull, and the
    rate run's pulls per second (0 without)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    d = Path(tempfile.mkdtemp(prefix="custody-py-bench-", dir=base))
    try:
        pair = start_pair(
            a.custody,
            d,
            blocks=2 * max(a.concurrency, 1),
            block_size=a.block_size,
            params={"fence": a.fence},
        )
        try:
            b = Bench(pair, max(a.concurrency, 1))
            try:
                b.sequential("warm", a.warmup)
                seq, reads, took, cpu = b.sequential("seq", a.pulls)
                rate = b.concurrent(a.concurrency, a.duration) if a.concurrency else 0.0
            finally:
                b.stop()
        finally:
            pair.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return seq, reads, took, cpu, rate


def main() -> None:
    """Runs the bench and prints its figures."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--custody", type=Path, default=custody_binary(), help="the custody binary")
    ap.add_argument("--pulls", type=int, default=200, help="sequential pulls measured")
    ap.add_argument("--warmup", type=int, default=20, help="pulls before the measured ones")
    ap.add_argument("--concurrency", type=int, default=64, help="pulls in flight, rate run")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of the rate run")
    ap.add_argument("--block-size", type=int, default=16 << 10, help="bytes per block")
    ap.add_argument("--fence", default="initiated", help="the fake's fence parameter")
    ap.add_argument("--rounds", type=int, default=1, help="rounds, each on a new pair of hosts")
    ap.add_argument(
        "--against-go",
        action="store_true",
        help="each round runs custody bench e2e first, and the last lines compare",
    )
    a = ap.parse_args()
    if a.pulls < 1 or a.concurrency < 0 or a.duration <= 0 or a.rounds < 1:
        ap.error(
            "--pulls and --rounds must be at least 1, --concurrency at least 0, --duration positive"
        )
    # per round: p50, engine-side CPU per pull, Read call p50
    go: list[tuple[float, float, float]] = []
    py: list[tuple[float, float, float]] = []
    for i in range(a.rounds):
        if a.against_go:
            go.append(go_pull(a.custody, a.pulls, a.block_size, a.fence))
        seq, reads, took, cpu, rate = run(a)
        py.append((pct(seq, 50), cpu, pct(reads, 50)))
        if a.rounds > 1:
            line = f"round {i + 1}: py p50 {us(py[-1][0])} cpu/pull {us(cpu)}"
            if go:
                g = go[-1]
                line += f"  go p50 {us(g[0])} cpu/pull {us(g[1])}  ratio {py[-1][0] / g[0]:.2f}"
            print(line, flush=True)
    print(
        f"python bench/pull.py: fake transport, fence={a.fence}, {a.block_size} B blocks, "
        f"Python {sys.version.split()[0]}"
    )
    print(
        f"method: as bench e2e: ExpectSend on prefill, Read of one block on decode "
        f"(notify_producer), timed from Read to decode's watch_finished report; prefill's report "
        f"awaited before the next pull; {a.warmup} warm-up pulls"
    )
    print(
        f"py pull latency       p50 {us(pct(seq, 50))}  p99 {us(pct(seq, 99))}  ({len(seq)} pulls)"
    )
    print(
        f"py read call          p50 {us(pct(reads, 50))}  p99 {us(pct(reads, 99))}  "
        f"(from Read until it returned: the part of the pull in the Read call)"
    )
    print(f"py sequential pulls/s {len(seq) / took:.0f}")
    print(f"py process CPU/pull   {us(cpu)}  (every thread of this process, sequential pulls)")
    if a.concurrency:
        print(f"py pulls/s at {a.concurrency:<3}    {rate:.0f}")
    if go:
        py_m, go_m = (statistics.median(x[0] for x in py), statistics.median(x[0] for x in go))
        py_c, go_c = (statistics.median(x[1] for x in py), statistics.median(x[1] for x in go))
        ratio = py_m / go_m
        print(f"median p50 of {a.rounds} rounds: py {us(py_m)}  go (bench e2e) {us(go_m)}")
        print(f"median engine-side CPU per pull: py {us(py_c)}  go {us(go_c)}")
        py_r, go_r = (statistics.median(x[2] for x in py), statistics.median(x[2] for x in go))
        print(
            f"median Read call p50: py {us(py_r)}  go {us(go_r)}  ratio {py_r / go_r:.2f}; "
            f"the rest of the pull (to the report): py {us(py_m - py_r)}  go {us(go_m - go_r)}"
        )
        print(
            f"goal name=py-pull-vs-go value={ratio:.2f} target={GOAL_RATIO:.2f} "
            f"met={'yes' if ratio <= GOAL_RATIO else 'no'}"
        )


if __name__ == "__main__":
    main()
