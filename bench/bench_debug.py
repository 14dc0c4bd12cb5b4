"""Benchmark: `wrp trace` and `wrp slice` on the 10,000-launch capture with a 256 MiB region.

Reports, in one run:

* ``wrpkit.trace`` with each engine, in process and with ``isolate=True`` (a
  child process, as ``wrp trace`` runs; its per-op time includes recording the
  op about to run for a crash report): time per op spent running
  ops (including the IF/WHILE conditions and the control writes), *beyond*
  the time spent digesting and summarizing written regions (reported apart),
  against a plain ``wp.capture_launch`` of the whole graph, per op, measured
  in the same run.  Target (issue 11): at most 20 us per op beyond the
  digests, and only the regions each op writes are digested (checked: the
  256 MiB region is digested once, by the one launch that writes it).
* ``wrp slice FILE --ops 5000:5010`` against ``wrp replay FILE`` of the whole
  file, both as fresh processes, median wall time.  Target: at most 2x.
* What ``--kernels FILE.py`` costs per file: importing it and matching the
  capture's kernels (``wrpkit.run.capture.source_types.type_from_source``), in
  process, for the big capture's own kernels file (``tests/programs.py``) and
  for a stock capture of a small script (``tests/nonfinite_chain.py``); and
  ``wrp trace STOCK --kernels SCRIPT`` against ``wrp trace STOCK`` as fresh
  processes (median wall).

Usage: python bench/bench_debug.py [--dir DIR] [--launches N] [--region-mib M] [--runs R]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_inspect import capture_bench_args, run_measured  # noqa: E402


def main() -> int:
    a, path = capture_bench_args(__doc__, runs=3,
                               extra=lambda ap: ap.add_argument("--engines", default="python,native"))

    import warp as wp  # noqa: PLC0415

    wp.config.quiet = True
    import wrpkit  # noqa: PLC0415

    # Stock: one capture_launch of the whole graph, per op.
    prog = wrpkit.load(path)
    wp.capture_launch(prog.graph)
    stock = []
    for _ in range(max(5, a.runs)):
        t0 = time.perf_counter()
        wp.capture_launch(prog.graph)
        stock.append(time.perf_counter() - t0)
    prog.close()
    del prog
    stock_per_op = min(stock) / a.launches
    print(f"file: {path} ({path.stat().st_size / 2**20:.1f} MiB, {a.launches} launches); "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"stock capture_launch of the whole graph: {stock_per_op * 1e6:.2f} us per op")
    for engine in a.engines.split(","):
        for isolate in (False, True):
            rows = []
            for _ in range(a.runs):
                t0 = time.perf_counter()
                t = wrpkit.trace(path, engine=engine, isolate=isolate)
                wall = time.perf_counter() - t0
                big = sum(1 for o in t.ops for w in o["writes"] if w["region"] == 0 or w["binding"] == "big")
                rows.append((t.step_seconds, t.step_cpu_seconds, t.digest_seconds, t.load_seconds, len(t.ops), big,
                             wall))
            step, step_cpu, dig, load, n, big, wall = min(rows)
            where = "in a child process (wrp trace)" if isolate else "in process"
            print(f"trace, {engine} engine, {where}: {step / n * 1e6:.2f} us per op beyond digests, wall "
                  f"({step_cpu / n * 1e6:.2f} us CPU; {step / n / stock_per_op:.1f}x a stock replay's per-op cost; "
                  f"target <= 20 us); digests {dig / n * 1e6:.2f} us per op ({dig:.3f} s total, "
                  f"{a.region_mib} MiB region digested {big}x); rewrite+load {load:.3f} s; {n} ops; whole call {wall:.2f} s")

    slice_out = a.dir / "bench_slice.wrp"
    slice_cmd = [sys.executable, "-m", "wrpkit.cli", "slice", str(path), "--ops", "5000:5010", "-o", str(slice_out)]
    replay_cmd = [sys.executable, "-m", "wrpkit.cli", "replay", str(path)]
    times = {"slice": [], "replay": []}
    for cmd in (slice_cmd, replay_cmd):
        run_measured(cmd)  # warm caches
    for _ in range(a.runs):  # interleaved
        times["slice"].append(run_measured(slice_cmd)[0])
        times["replay"].append(run_measured(replay_cmd)[0])
    s, r = statistics.median(times["slice"]), statistics.median(times["replay"])
    print(f"wrp slice --ops 5000:5010: {s:.3f} s; wrp replay of the whole file: {r:.3f} s; "
          f"ratio {s / r:.2f}x (target <= 2x)")
    kernels_cost(a, path)
    return 0


def kernels_cost(a, big: Path) -> None:
    """Print what ``--kernels`` costs per file (see the module docstring)."""
    from wrpkit.formats.annotations import read_annotations  # noqa: PLC0415
    from wrpkit.formats.container import open_capture  # noqa: PLC0415
    from wrpkit.run.capture.source_types import type_from_source  # noqa: PLC0415

    script = ROOT / "tests" / "nonfinite_chain.py"
    stock = a.dir / "chain_stock.wrp"
    if not stock.exists():
        subprocess.run([sys.executable, str(script), "if_in_while", str(stock)], check=True, capture_output=True)
    for capture, source in ((big, ROOT / "tests" / "programs.py"), (stock, script)):
        with open_capture(capture) as cap:
            secs = []
            for _ in range(max(3, a.runs)):
                typing = type_from_source(cap.program, read_annotations(cap.program), [source])
                secs.append(typing.seconds)
        print(f"--kernels {source.name} on {capture.name} ({len(cap.program.kernels)} kernels, "
              f"{len(typing.matched)} matched): {min(secs) * 1e3:.1f} ms per file (import + match, in process; "
              f"first call {secs[0] * 1e3:.1f} ms)")
    plain = [sys.executable, "-m", "wrpkit.cli", "trace", str(stock)]
    typed = plain + ["--kernels", str(script)]
    for cmd in (plain, typed):
        run_measured(cmd)
    times = {"plain": [], "typed": []}
    for _ in range(a.runs):
        times["plain"].append(run_measured(plain)[0])
        times["typed"].append(run_measured(typed)[0])
    p, t = statistics.median(times["plain"]), statistics.median(times["typed"])
    print(f"wrp trace {stock.name}: {p:.3f} s; with --kernels {script.name}: {t:.3f} s "
          f"(+{(t - p) * 1e3:.0f} ms for one --kernels file, fresh processes)")


if __name__ == "__main__":
    sys.exit(main())
