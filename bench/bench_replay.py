"""Replay benchmarks: wrpkit's runtime and CLI against raw Warp.

Prints, in one run:

(a) ``Program.run(repeat=R)`` against a raw ``wp.capture_launch`` loop on a
    CPU graph of 10,000 kernel launches (target: ratio <= 1.05);
(b) cold start of ``wrp replay`` on a small sample (a fresh process, wall
    time) against a fresh ``python -c "import warp; capture_load;
    capture_launch"``;
(c) the cost of containment: ``wrpkit.load(..., isolate=True).run()`` (a replay
    in the program's child process, which the first run starts and loads:
    a request, the replay, every binding back) against ``Program.run()``
    in-process, one replay of the 10,000-launch graph; and the first run.

Usage::

    python bench/bench_replay.py [--launches 10000] [--repeat 20] [--trials 5] [--cold 5] [--isolated 5]

Nothing here asserts on timings; the tests never time anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

import warp as wp  # noqa: E402

wp.config.quiet = True
wp.config.log_level = getattr(wp, "LOG_WARNING", 0)

import wrpkit  # noqa: E402
from as_installed import cache_bytecode  # noqa: E402  (bench/ is on sys.path)


def _capture_big(out_dir: Path, launches: int) -> Path:
    import programs  # tests/programs.py  # noqa: PLC0415

    prog = programs.make_big(launches=launches, region_bytes=1 << 16)
    arrays = prog.make_arrays("cpu")
    with wrpkit.capture(device="cpu") as rec:
        prog.step(arrays)
    return rec.save(out_dir / "big", inputs={n: arrays[n] for n in prog.inputs},
                    outputs={n: arrays[n] for n in prog.outputs})


def bench_run_overhead(out_dir: Path, launches: int, repeat: int, trials: int) -> None:
    path = _capture_big(out_dir, launches)
    prog = wrpkit.load(path, device="cpu")
    raw = wp.capture_load(str(path), device="cpu")
    bufs = {n: wp.empty(s, dtype=wp.uint8, device="cpu") for n, s in prog.bindings.items()}

    def raw_loop():
        for _ in range(repeat):
            wp.capture_launch(raw)

    def raw_loop_and_read():
        raw_loop()
        for n, b in bufs.items():
            raw.get_param(n, b)
        return {n: b.numpy().copy() for n, b in bufs.items()}

    def wrpkit_run():
        return prog.run(repeat=repeat)

    # warm both (JIT'd objects, page faults)
    raw_loop_and_read()
    wrpkit_run()
    times = {"raw": [], "raw+read": [], "wrpkit": []}
    for _ in range(trials):  # interleaved so that drift hits all three alike
        for key, fn in (("raw", raw_loop), ("raw+read", raw_loop_and_read), ("wrpkit", wrpkit_run)):
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    per = launches * repeat
    print(f"(a) Program.run(repeat={repeat}) vs raw wp.capture_launch loop, CPU graph of {launches} launches")
    print(f"    raw capture_launch loop        : {best['raw'] * 1e3:9.2f} ms  "
          f"({best['raw'] / per * 1e9:6.1f} ns/launch)")
    print(f"    raw loop + get_param readback  : {best['raw+read'] * 1e3:9.2f} ms")
    print(f"    wrpkit Program.run             : {best['wrpkit'] * 1e3:9.2f} ms")
    print(f"    ratio run / raw loop           : {best['wrpkit'] / best['raw']:.3f}x   (target <= 1.05x)")
    print(f"    ratio run / raw loop + readback: {best['wrpkit'] / best['raw+read']:.3f}x")


def _cold(cmd, env, runs: int) -> tuple:
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return statistics.median(walls), min(walls)


def bench_cold_start(out_dir: Path, runs: int) -> None:
    sys.path.insert(0, str(ROOT / "samples"))
    import saxpy  # samples/saxpy.py  # noqa: PLC0415

    wrp = Path(saxpy.capture(out_dir / "saxpy"))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cli = [sys.executable, "-m", "wrpkit.cli", "replay", str(wrp), "--json"]
    stock = [sys.executable, "-c",
             "import warp as wp; wp.config.quiet = True; "
             f"g = wp.capture_load({str(wrp)!r}, device='cpu'); wp.capture_launch(g)"]
    cli_med, cli_min = _cold(cli, env, runs)
    st_med, st_min = _cold(stock, env, runs)
    print(f"(b) cold start on sample saxpy (fresh process, median of {runs} runs)")
    print(f"    wrp replay                     : {cli_med * 1e3:9.1f} ms  (min {cli_min * 1e3:.1f})")
    print(f"    python -c capture_load+launch  : {st_med * 1e3:9.1f} ms  (min {st_min * 1e3:.1f})")
    print(f"    ratio                          : {cli_med / st_med:.2f}x")


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc), 0.0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def bench_isolate(out_dir: Path, launches: int, runs: int) -> None:
    path = _capture_big(out_dir, launches)
    prog = wrpkit.load(path, device="cpu")
    iso = wrpkit.load(path, device="cpu", isolate=True)
    prog.run()
    t0 = time.perf_counter()
    iso.run()  # the first run starts the child: process start, import warp, load
    first = time.perf_counter() - t0
    pid = iso._worker.proc.pid

    times = {"in-process": [], "isolated": []}
    child_cpu = []
    for _ in range(runs):  # interleaved
        for key, fn in (("in-process", prog.run), ("isolated", iso.run)):
            c0 = _process_cpu_s(pid)
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
            if key == "isolated":
                child_cpu.append(_process_cpu_s(pid) - c0)
    assert iso._worker.proc.pid == pid, "the replay child was restarted"
    iso.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"(c) one replay of the {launches}-launch graph, in-process vs isolate=True (median of {runs})")
    print(f"    Program.run()                  : {med['in-process'] * 1e3:9.2f} ms")
    print(f"    load(isolate=True).run()       : {med['isolated'] * 1e3:9.2f} ms  "
          f"(+{(med['isolated'] - med['in-process']) * 1e3:.0f} ms per call; the child stays loaded)")
    print(f"    ratio                          : {med['isolated'] / med['in-process']:.1f}x")
    print(f"    CPU time of the child per call : {statistics.median(child_cpu) * 1e3:9.0f} ms  (user + system; "
          "less sensitive to a loaded machine than wall time)")
    print(f"    first run (starts the child)   : {first * 1e3:9.0f} ms  (process start, import warp, load)")


def main() -> None:
    cache_bytecode()  # measure wrpkit as an install runs it (bench/as_installed.py)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--cold", type=int, default=5, help="fresh-process runs per cold-start command")
    ap.add_argument("--isolated", type=int, default=5, help="isolated runs (0 skips (c))")
    ap.add_argument("--only-isolated", action="store_true", help="run (c) alone")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="wrpkit-bench-") as d:
        d = Path(d)
        if not args.only_isolated:
            bench_run_overhead(d, args.launches, args.repeat, args.trials)
            bench_cold_start(d, args.cold)
        if args.isolated:
            bench_isolate(d, args.launches, args.isolated)
    _ = np  # numpy is imported first so that its import cost is not in the timings


if __name__ == "__main__":
    main()
