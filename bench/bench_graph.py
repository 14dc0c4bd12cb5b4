"""Benchmark: ``wrp graph`` on a 10,000-launch capture, and what argument analysis costs a capture.

Reports, in one run (medians of ``--runs`` repeats after one warm-up each;
this machine is often shared, so medians, not bests):

* wall time of ``wrp graph FILE -o FILE.html`` (fresh process, CLI start
  included, with the bytecode cache a user has) and the HTML's size, and the
  in-process split: decode, build the graph, write the HTML;
* the time Chromium takes to load that page until it has drawn it (through
  Playwright with the system ``chromium``; a fresh page each time), skipped
  when Playwright or Chromium is missing;
* the cost of recording argument access at capture (process CPU time, which
  other jobs on a shared machine disturb far less than wall time): ``wrpkit.capture`` +
  ``Recording.save`` of 4 programs (20 distinct kernels) with the analysis
  (its per-kernel cache cleared first: every kernel analysed, as in a fresh
  process), with it warm (cached, as in every later capture of a process),
  and with the analysis replaced by a no-op, interleaved in one process in
  alternating order; and the analysis of those kernels alone.

Targets (issue #14): the page loads in < 2 s and stays < 5 MB; the analysis
costs a capture nothing measurable.

Usage: python bench/bench_graph.py [--dir DIR] [--launches N] [--runs R] [--chromium PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from as_installed import cache_bytecode  # noqa: E402  (bench/ is on sys.path)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def make_capture(directory: Path, launches: int) -> Path:
    path = directory / f"big_{launches}_graph.wrp"
    if not path.exists():
        code = ("import sys; sys.path.insert(0, %r); import programs; "
                "programs.capture_to_file(programs.make_big(%d, 4096), %r)") % (str(ROOT / "tests"), launches, str(path))
        subprocess.run([sys.executable, "-c", code], check=True)
    return path


def bench_cli(path: Path, runs: int) -> tuple:
    """(median seconds, HTML bytes, HTML path) of ``wrp graph`` in a fresh process."""
    out = path.with_suffix(".html")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times, cpu = [], []
    for _ in range(runs + 1):  # the first run warms the bytecode cache
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "wrpkit.cli", "graph", str(path), "-o", str(out)], check=True,
                       stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - t0)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime)
    return statistics.median(times[1:]), statistics.median(cpu[1:]), out.stat().st_size, out


def bench_in_process(path: Path, runs: int) -> tuple:
    """Median CPU seconds of (decode, build the graph, render the HTML)."""
    from wrpkit.debug import graph as g  # noqa: PLC0415
    from wrpkit.formats.container import open_capture  # noqa: PLC0415

    parts = []
    for _ in range(runs + 1):
        t0 = time.process_time()
        with open_capture(path) as cap:
            t1 = time.process_time()
            gr = g.build_graph(cap.program, title=path.name)
            t2 = time.process_time()
            g.render_html(gr)
            t3 = time.process_time()
        parts.append((t1 - t0, t2 - t1, t3 - t2))
    return tuple(statistics.median(p[i] for p in parts[1:]) for i in range(3))


def bench_browser(html: Path, runs: int, chromium: str):
    """Median seconds from navigation to the page's drawn view, or None without a browser."""
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415
    except ImportError:
        return None
    if not os.path.exists(chromium):
        return None
    times = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for _ in range(runs + 1):
            page = b.new_page()
            t0 = time.perf_counter()
            page.goto(html.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']")
            times.append(time.perf_counter() - t0)
            page.close()
        b.close()
    return statistics.median(times[1:])


def bench_capture_cost(runs: int) -> dict:
    """Median seconds of capture+save with the analysis cold, warm and off, and of the analysis alone."""
    code = r'''
import json, statistics, sys, time, tempfile, warp as wp, wrpkit
sys.path.insert(0, %r)
import programs
from wrpkit.run.capture import recording, access
wp.init()
prog = [programs.PROGRAMS[n] for n in ("scalars", "vecmat", "structs", "arrays_nd")]
def once():
    with tempfile.TemporaryDirectory() as d:
        t0 = time.process_time()
        for i, p in enumerate(prog):
            arrs = p.make_arrays("cpu")
            with wrpkit.capture(device="cpu") as rec:
                p.step(arrs)
            rec.save(d + "/c%%d.wrp" %% i)
        return time.process_time() - t0
once()
real = recording.kernel_argument_access
noop = lambda k: ()
t = {"cold": [], "warm": [], "off": [], "alone": []}
for r in range(%d):
    for mode in (("cold", "off", "warm") if r %% 2 == 0 else ("warm", "off", "cold")):
        if mode == "cold":
            access._kernel_cache.clear(); access._func_cache.clear()
        recording.kernel_argument_access = noop if mode == "off" else real
        t[mode].append(once())
kernels = list(access._kernel_cache.keys())
for r in range(max(20, %d)):
    access._kernel_cache.clear(); access._func_cache.clear()
    t0 = time.process_time()
    for k in kernels:
        real(k)
    t["alone"].append(time.process_time() - t0)
out = {k: statistics.median(v) for k, v in t.items()}
out["kernels"] = len(kernels)
print(json.dumps(out))
''' % (str(ROOT / "tests"), runs, runs)
    res = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    import json  # noqa: PLC0415

    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    cache_bytecode()  # measure wrpkit as an install runs it (bench/as_installed.py)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--launches", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = a.dir or Path(tmp)
        path = make_capture(d, a.launches)
        t, cpu, nbytes, html = bench_cli(path, a.runs)
        dec, build, render = bench_in_process(path, a.runs)
        print(f"wrp graph, {a.launches} launches: {t:.3f} s (CLI wall, median of {a.runs}; CPU {cpu:.3f} s), HTML {nbytes / 2**20:.3f} MiB; "
              f"in process (CPU): decode {dec:.3f} s, graph {build:.3f} s, HTML {render:.3f} s")
        load = bench_browser(html, a.runs, a.chromium)
        print("Chromium load: " + (f"{load:.3f} s (median of {a.runs})" if load is not None
                                   else "skipped (no playwright or chromium)"))
        c = bench_capture_cost(a.runs)
        print(f"capture+save of 4 programs ({c['kernels']} kernels), medians of {a.runs}: analysis cold "
              f"{c['cold']:.3f} s ({c['cold'] / c['off']:.3f}x), warm {c['warm']:.3f} s "
              f"({c['warm'] / c['off']:.3f}x), without {c['off']:.3f} s; the analysis alone "
              f"{c['alone'] * 1e3:.2f} ms ({c['alone'] / c['off'] * 100:.1f}% of a capture+save)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
