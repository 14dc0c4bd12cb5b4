"""Benchmark: ``wrp graph`` on a 10,000-launch capture, and what argument analysis costs a capture.

Reports, in one run:

* wall time of ``wrp graph FILE -o FILE.html`` (fresh process, CLI start
  included; best of ``--runs``) and the HTML's size;
* the time Chromium takes to load that page until it has drawn it (best of
  ``--runs``, through Playwright with the system ``chromium``), skipped when
  Playwright or Chromium is missing;
* the cost of recording argument access at capture: ``wrpkit.capture`` +
  ``Recording.save`` of a program with 12 distinct kernels, against the same
  capture and save with the analysis replaced by a no-op, interleaved.

Targets (issue #14): the page loads in < 2 s and stays < 5 MB; the analysis
costs a capture nothing measurable.

Usage: python bench/bench_graph.py [--dir DIR] [--launches N] [--runs R] [--chromium PATH]
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
    out = path.with_suffix(".html")
    times = []
    for _ in range(runs + 1):  # first run warms the bytecode cache
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "wrpkit.cli", "graph", str(path), "-o", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return min(times[1:]), out.stat().st_size, out


def bench_browser(html: Path, runs: int, chromium: str):
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
    return min(times[1:])


def bench_capture_cost(runs: int) -> tuple:
    """(with analysis, without) seconds for capture+save of a program with many distinct kernels."""
    code = r'''
import sys, time, tempfile, warp as wp, wrpkit
sys.path.insert(0, %r)
import programs
from wrpkit.run import recording, access
wp.init()
prog = programs.PROGRAMS["scalars"], programs.PROGRAMS["vecmat"], programs.PROGRAMS["structs"], programs.PROGRAMS["arrays_nd"]
def once():
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        for i, p in enumerate(prog):
            arrs = p.make_arrays("cpu")
            with wrpkit.capture(device="cpu") as rec:
                p.step(arrs)
            rec.save(d + "/c%%d.wrp" %% i)
        return time.perf_counter() - t0
once()
real = recording.kernel_argument_access
noop = lambda k: ()
on, off = [], []
for r in range(%d):
    access._kernel_cache.clear(); access._func_cache.clear()
    recording.kernel_argument_access = real; on.append(once())
    recording.kernel_argument_access = noop; off.append(once())
print(min(on), min(off))
''' % (str(ROOT / "tests"), runs)
    res = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    on, off = (float(x) for x in res.stdout.split()[-2:])
    return on, off


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--launches", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = a.dir or Path(tmp)
        path = make_capture(d, a.launches)
        t, nbytes, html = bench_cli(path, a.runs)
        print(f"wrp graph, {a.launches} launches: {t:.3f} s (CLI, best of {a.runs}), HTML {nbytes / 2**20:.2f} MiB")
        load = bench_browser(html, a.runs, a.chromium)
        print("Chromium load: " + (f"{load:.3f} s (best of {a.runs})" if load is not None
                                   else "skipped (no playwright or chromium)"))
        on, off = bench_capture_cost(a.runs)
        print(f"capture+save of 4 programs: with access analysis {on:.3f} s, without {off:.3f} s "
              f"({on / off:.3f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
