"""What recording call sites costs a capture: ``wrpkit.capture`` with and without ``call_sites``.

A step of ``--launches`` kernel launches (100 by default; every tenth also a ``wp.copy`` and an
``array.zero_``, one ``wp.capture_if`` around a launch) is captured on the CPU with
``wrpkit.capture(call_sites=True)`` and ``wrpkit.capture(call_sites=False)``, interleaved,
``--reps`` times after one warm-up each.  Timed: the ``with`` block (Warp records the ops;
wrpkit wraps Warp's native entry points and reads the call stack of each op) and the save
(``Recording.save``: the call sites are encoded into the annotations).  The table gives medians
and the ratio with / without.  Stock ``wp.capture_begin(apic=True)`` is timed too, as the floor.

Usage::

    python bench/bench_call_sites.py [--launches 100] [--reps 15]

Nothing here asserts on timings; the tests never time anything.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import warp as wp

wp.config.quiet = True

import wrpkit  # noqa: E402


@wp.kernel
def axpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float):
    i = wp.tid()
    y[i] = y[i] + a * x[i]


def step(x, y, z, flag, launches: int) -> None:
    for i in range(launches):
        wp.launch(axpy, dim=x.shape[0], inputs=[x, y, 0.5], device=x.device)
        if i % 10 == 9:
            wp.copy(z, y)
            z.zero_()
    wp.capture_if(flag, on_true=lambda: wp.launch(axpy, dim=x.shape[0], inputs=[y, x, 0.25], device=x.device))


def one(kind: str, arrays, launches: int, out: Path) -> tuple:
    """``(seconds recording, seconds saving)`` of one capture of the step."""
    t0 = time.perf_counter()
    if kind == "stock":
        wp.capture_begin(device="cpu", apic=True)
        step(*arrays, launches)
        graph = wp.capture_end(device="cpu")
        t1 = time.perf_counter()
        wp.capture_save(graph, str(out.with_suffix("")))
        return t1 - t0, time.perf_counter() - t1
    with wrpkit.capture(device="cpu", call_sites=kind == "call sites") as rec:
        step(*arrays, launches)
    t1 = time.perf_counter()
    rec.save(out)
    return t1 - t0, time.perf_counter() - t1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    x = wp.array(np.ones(1024, np.float32), device="cpu")
    y = wp.zeros(1024, dtype=float, device="cpu")
    z = wp.zeros(1024, dtype=float, device="cpu")
    flag = wp.array([1], dtype=wp.int32, device="cpu")
    arrays = (x, y, z, flag)
    step(*arrays, 1)  # compile outside the timings
    kinds = ("stock", "no call sites", "call sites")
    times = {k: ([], []) for k in kinds}
    with tempfile.TemporaryDirectory(prefix="wrpkit-bench-callsites-") as d:
        for k in kinds:
            one(k, arrays, a.launches, Path(d) / "warm.wrp")
        for r in range(a.reps):
            for k in kinds:
                rec, save = one(k, arrays, a.launches, Path(d) / f"{r}.wrp")
                times[k][0].append(rec)
                times[k][1].append(save)
    med = {k: (statistics.median(v[0]) * 1e3, statistics.median(v[1]) * 1e3) for k, v in times.items()}
    ops = a.launches + 2 * (a.launches // 10) + 2
    print(f"capture of a {ops}-op step (CPU), medians of {a.reps}")
    print(f"{'':<16}{'record ms':>11}{'save ms':>10}")
    for k in kinds:
        print(f"{k:<16}{med[k][0]:>11.3f}{med[k][1]:>10.3f}")
    rec_ratio = med["call sites"][0] / med["no call sites"][0]
    total_ratio = sum(med["call sites"]) / sum(med["no call sites"])
    per_op_us = (med["call sites"][0] - med["no call sites"][0]) * 1e3 / ops
    print(f"call sites / none: recording x{rec_ratio:.2f} ({per_op_us:+.1f} us per op), record+save x{total_ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
