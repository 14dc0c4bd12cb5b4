"""``wrp regress`` throughput: -j 2 and a two-worker Dask cluster against -j 1, and the per-case overhead.

Builds a suite of ``--cases`` small wrpkit captures (default 50; launch
sizes and constants vary, goldens from numpy), then, in one run:

(a) ``wrpkit.regress(suite, jobs=1)`` and ``jobs=2``: cases per second, each
    run including its start-up (the run's zygote: a process and ``import
    warp``, which its replay children are forked from); ratio target >= 1.7x.
    With ``s`` the start-up a case waited for and ``c`` a case's wall time
    at -j 1, ``T1 = s + n c`` and ``T2 = s + (n / 2) c / e``: the line prints
    ``s``, ``c``, the efficiency ``e`` of -j 2's steady state, and the ceiling
    of the ratio at ``e = 1`` for this ``n``;
(b) a local Dask cluster (2 worker processes, 1 thread each, on 127.0.0.1):
    its start-up (cluster and client) reported separately, then a first run
    (workers start their replay children) and a second, warm run; ratio
    target >= 1.5x of -j 1;
(c) per-case overhead beyond the replay itself, serially with a warm worker:
    a case's wall time in its worker (read the files, validate, send the
    bindings, load in the warm child, replay, read back, compare) minus the
    replay's own host time; target <= 150 ms.

Usage::

    python bench/bench_regress.py [--cases 50] [--rounds 3] [--no-dask]

Nothing here asserts on timings; the tests never time anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import warp as wp  # noqa: E402

wp.config.quiet = True
wp.config.log_level = getattr(wp, "LOG_WARNING", 0)

import wrpkit  # noqa: E402


@wp.kernel
def k_poly(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32), a: float):
    i = wp.tid()
    y[i] = a * x[i] * x[i] + x[i]


def build_suite(d: Path, n: int) -> Path:
    for i in range(n):
        size = 256 * (1 + i % 8)
        a = 0.5 + 0.25 * (i % 5)
        x0 = np.linspace(-1, 1, size, dtype=np.float32)
        x = wp.array(x0, device="cpu")
        y = wp.zeros(size, dtype=wp.float32, device="cpu")
        with wrpkit.capture(device="cpu") as rec:
            wp.launch(k_poly, dim=size, inputs=[x, y, a], device="cpu")
        sub = d / f"group{i % 4}"
        sub.mkdir(parents=True, exist_ok=True)
        rec.save(sub / f"case{i:03d}.wrp", inputs={"x": x}, outputs={"y": y})
        xin = x0[::-1].copy()
        np.savez(sub / f"case{i:03d}_inputs.npz", x=xin)
        np.savez(sub / f"case{i:03d}_expected.npz", y=(np.float32(a) * xin * xin + xin).astype(np.float32))
    return d


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its children it has waited for.

    A run's zygote is waited for when the run ends, and it waits for its
    forks, so a run's replay children count: the figure the machine's load
    does not change much, unlike the wall time.
    """
    import resource  # noqa: PLC0415

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn, cpu=None):
    t0, c0 = time.perf_counter(), cpu_seconds()
    out = fn()
    if cpu is not None:
        cpu.append(cpu_seconds() - c0)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of -j 1 and -j 2")
    ap.add_argument("--no-dask", action="store_true")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="bench-regress-") as tmp:
        suite = build_suite(Path(tmp) / "suite", args.cases)
        n = args.cases
        j1, j2, s1, s2, cpu1, cpu2 = [], [], [], [], [], []
        for _ in range(args.rounds):  # interleaved, so both see the same machine
            t, rep = timed(lambda: wrpkit.regress(suite, jobs=1), cpu1)
            assert len(rep.passed) == n, rep.counts()
            j1.append(t)
            s1.append(t - max(c.worker_start_s for c in rep.cases))
            t, rep2 = timed(lambda: wrpkit.regress(suite, jobs=2), cpu2)
            assert len(rep2.passed) == n, rep2.counts()
            j2.append(t)
            s2.append(t - max(c.worker_start_s for c in rep2.cases))  # the children start side by side
        m1, m2 = statistics.median(j1), statistics.median(j2)
        w1, w2 = statistics.median(s1), statistics.median(s2)
        print(f"(a) -j 1: {n / m1:.1f} cases/s (median {m1:.2f} s of {args.rounds}: "
              f"{', '.join(f'{x:.2f}' for x in j1)}); without the replay child's start {n / w1:.1f} cases/s")
        print(f"    -j 2: {n / m2:.1f} cases/s (median {m2:.2f} s: {', '.join(f'{x:.2f}' for x in j2)}); "
              f"{m1 / m2:.2f}x of -j 1 (target >= 1.7x); without the children's start {n / w2:.1f} cases/s, "
              f"{w1 / w2:.2f}x")
        s_start = statistics.median(a - b for a, b in zip(j1, s1))
        c = w1 / n
        e = (n / 2 * c) / w2
        ceiling = (s_start + n * c) / (s_start + n * c / 2)
        print(f"    start-up s {s_start:.2f} s, case c {c * 1e3:.1f} ms at -j 1; -j 2 steady-state efficiency "
              f"e {e:.2f}; ceiling of the ratio at e = 1 for {n} cases: {ceiling:.2f}x "
              f"(1.7x needs c >= {0.7 * s_start / (n * 0.15) * 1e3:.1f} ms at {n} cases, or "
              f"n >= {0.7 * s_start / (0.15 * c):.0f} cases at this c)")
        print(f"    CPU seconds per run (this process and its replay processes), median: -j 1 "
              f"{statistics.median(cpu1):.2f}, -j 2 {statistics.median(cpu2):.2f}")

        # (c) from the last serial run: every case after the first has a warm worker
        warm = [c for c in rep.cases if c.worker_start_s == 0]
        over = [c.seconds - (c.replay_ms or 0) / 1e3 for c in warm]
        replay = [(c.replay_ms or 0) for c in warm]
        print(f"(c) per case with a warm worker ({len(warm)} cases): wall in worker median "
              f"{statistics.median(c.seconds for c in warm) * 1e3:.1f} ms; replay itself median "
              f"{statistics.median(replay):.3f} ms; overhead beyond the replay median "
              f"{statistics.median(over) * 1e3:.1f} ms, p90 {sorted(over)[int(0.9 * (len(over) - 1))] * 1e3:.1f} "
              f"ms (target <= 150 ms); replay child start (first case) "
              f"{max(c.worker_start_s for c in rep.cases):.2f} s")
        serial_wall = m1

        if not args.no_dask:
            try:
                from distributed import LocalCluster  # noqa: PLC0415
            except ImportError:
                print("(b) skipped: distributed is not installed (pip install 'wrpkit[dask]')")
                return
            t0 = time.perf_counter()
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address=None, silence_logs=40)
            start = time.perf_counter() - t0
            try:
                runs = []
                for _ in range(max(2, args.rounds)):
                    t, rep3 = timed(lambda: wrpkit.regress(suite, dask=cluster.scheduler_address))
                    assert len(rep3.passed) == n, rep3.counts()
                    runs.append(t)
            finally:
                cluster.close()
            first, warm_runs = runs[0], runs[1:]
            mw = statistics.median(warm_runs)
            print(f"(b) dask, 2 workers: cluster start-up {start:.2f} s (reported apart); first run {first:.2f} s "
                  f"({n / first:.1f} cases/s, {serial_wall / first:.2f}x of -j 1, workers start their replay "
                  f"children); warm runs median {mw:.2f} s ({n / mw:.1f} cases/s, {serial_wall / mw:.2f}x of -j 1; "
                  f"target >= 1.5x)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
