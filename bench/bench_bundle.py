"""Benchmark: .wrp <-> .wrpk conversion against `cp -r`, and loading a .wrpk against stock capture_load.

On a capture with one 256 MiB region (10,000 launches by default), reports in one run:

* ``wrp convert X.wrp X.wrpk`` and ``wrp convert X.wrpk out/X.wrp`` (the CLI, in
  a fresh process, and the same conversions through ``wrpkit.formats.convert.convert``
  in one process) against ``cp -r X.wrp X_modules/ dest/`` of the same files:
  throughput in MB/s and the ratio to cp (target >= 0.5x), plus each
  process's peak RSS, which shows whether the data was held in memory (it is
  streamed: region data is written from the source mapping, copied once);
* loading: ``wrpkit.load("X.wrpk")`` against ``wp.capture_load("X.wrp")``, each
  in a fresh process that imports Warp (target: wrpkit at least as fast, >= 1x),
  runs interleaved, and the two loads alone in one process that has started Warp;
* the floors under the conversion rows: SHA-256 of every blob once, on one
  thread (both directions must do it: the format stores each blob's digest),
  and the time to start Python and import the CLI (in the CLI rows only).

Usage: python bench/bench_bundle.py [--dir DIR] [--launches N] [--region-mib M] [--runs R]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_inspect import capture_bench_args, run_measured  # noqa: E402


def tree_size(wrp: Path) -> int:
    mdir = wrp.with_name(wrp.stem + "_modules")
    return wrp.stat().st_size + sum(f.stat().st_size for f in mdir.iterdir())


def best(cmd, runs, before=None):
    out = []
    for _ in range(runs):
        if before:
            before()
        out.append(run_measured(cmd))
    return statistics.median(w for w, _, _ in out), max(r for _, r, _ in out)


def main() -> int:
    a, src = capture_bench_args(__doc__, runs=3)
    nbytes = tree_size(src)
    work = a.dir / "bundle"
    shutil.rmtree(work, ignore_errors=True)
    (work / "cp").mkdir(parents=True)
    (work / "back").mkdir()
    wrpk = work / "g.wrpk"
    back = work / "back" / src.name
    py = sys.executable

    def clear_cp():
        shutil.rmtree(work / "cp")
        (work / "cp").mkdir()

    cp_cmd = ["cp", "-r", str(src), str(src.with_name(src.stem + "_modules")), str(work / "cp")]
    to_wrpk = [py, "-m", "wrpkit.cli", "convert", "-q", str(src), str(wrpk)]
    to_wrp = [py, "-m", "wrpkit.cli", "convert", "-q", str(wrpk), str(back)]
    def clear_wrpk():
        wrpk.unlink(missing_ok=True)

    def clear_back():
        shutil.rmtree(work / "back")
        (work / "back").mkdir()

    # Every writer gets a fresh destination, as cp does: replacing an old
    # 271 MB file would add the cost of freeing it.
    run_measured(cp_cmd)
    clear_wrpk()
    run_measured(to_wrpk)  # fills the bytecode cache, as installing wrpkit would
    clear_back()
    run_measured(to_wrp)
    cp_t, cp_rss = best(cp_cmd, a.runs, clear_cp)
    pack_t, pack_rss = best(to_wrpk, a.runs, clear_wrpk)
    unpack_t, unpack_rss = best(to_wrp, a.runs, clear_back)
    identical = src.read_bytes() == back.read_bytes()
    # The same conversions through the library API in one process (no
    # interpreter start or imports): the conversion's own throughput.
    lib_code = (
        "import os, shutil, statistics, sys, time\n"
        "from pathlib import Path\n"
        "from wrpkit.formats.convert import convert\n"
        "src, wrpk, back, runs = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])\n"
        "p, u = [], []\n"
        "for _ in range(runs):\n"
        "    wrpk.unlink(missing_ok=True); shutil.rmtree(back.parent); back.parent.mkdir()\n"
        "    t = time.perf_counter(); convert(src, wrpk); p.append(time.perf_counter() - t)\n"
        "    t = time.perf_counter(); convert(wrpk, back); u.append(time.perf_counter() - t)\n"
        "# The floor: SHA-256 of every blob once, which both directions must do.\n"
        "import hashlib\n"
        "from wrpkit.formats.container import open_capture\n"
        "h = []\n"
        "with open_capture(src) as cap:\n"
        "    blobs = [r.data for r in cap.program.regions if r.has_initial_data] + list(cap.module_files().values())\n"
        "    for _ in range(runs):\n"
        "        t = time.perf_counter(); [hashlib.sha256(b).digest() for b in blobs]; h.append(time.perf_counter() - t)\n"
        "    del blobs\n"
        "print(statistics.median(p), statistics.median(u), statistics.median(h))\n")
    out = subprocess.run([py, "-c", lib_code, str(src), str(wrpk), str(back), str(max(a.runs, 5))],
                         check=True, capture_output=True, text=True).stdout.split()
    lib_pack, lib_unpack, hash_t = float(out[0]), float(out[1]), float(out[2])
    startup = [py, "-c", "import wrpkit.cli"]
    run_measured(startup)
    startup_t, _ = best(startup, a.runs)

    stock = [py, "-c", f"import warp as wp; wp.config.log_level = 40; wp.capture_load({str(src)!r}, device='cpu')"]
    mine = [py, "-c", f"import wrpkit, warp as wp; wp.config.log_level = 40; wrpkit.load({str(wrpk)!r}, device='cpu')"]
    run_measured(stock)
    run_measured(mine)
    # Interleaved, so that drift in the machine's speed hits both alike: most
    # of each process is the same `import warp` and Warp start-up.
    stock_runs, mine_runs = [], []
    for _ in range(max(a.runs, 9)):
        stock_runs.append(run_measured(stock))
        mine_runs.append(run_measured(mine))
    stock_t, stock_rss = statistics.median(w for w, _, _ in stock_runs), max(r for _, r, _ in stock_runs)
    mine_t, mine_rss = statistics.median(w for w, _, _ in mine_runs), max(r for _, r, _ in mine_runs)
    # The loads alone, in one process that has already imported and started Warp.
    inproc_code = (
        "import statistics, sys, time, warp as wp, wrpkit\n"
        "wp.config.log_level = 40; wp.init()\n"
        "s, w = [], []\n"
        "for _ in range(int(sys.argv[3])):\n"
        "    t = time.perf_counter(); wp.capture_load(sys.argv[1], device='cpu'); s.append(time.perf_counter() - t)\n"
        "    t = time.perf_counter(); wrpkit.load(sys.argv[2], device='cpu'); w.append(time.perf_counter() - t)\n"
        "print(statistics.median(s), statistics.median(w))\n")
    out = subprocess.run([py, "-c", inproc_code, str(src), str(wrpk), str(max(a.runs, 5))], check=True,
                         capture_output=True, text=True).stdout.split()
    stock_in, mine_in = float(out[0]), float(out[1])

    mb = nbytes / 1e6
    print(f"capture: {src.name}, {mb:.1f} MB with modules; bundle {wrpk.stat().st_size / 1e6:.1f} MB; "
          f"median of {a.runs}; {os.cpu_count()} cores")
    print(f"{'operation':<34}{'wall (s)':>9}{'MB/s':>9}{'vs cp':>8}{'peak RSS MiB':>14}")
    print(f"{'cp -r .wrp + modules':<34}{cp_t:>9.3f}{mb / cp_t:>9.0f}{1.0:>8.2f}{cp_rss:>14.1f}")
    print(f"{'wrp convert .wrp -> .wrpk':<34}{pack_t:>9.3f}{mb / pack_t:>9.0f}{cp_t / pack_t:>8.2f}{pack_rss:>14.1f}")
    print(f"{'wrp convert .wrpk -> .wrp':<34}{unpack_t:>9.3f}{mb / unpack_t:>9.0f}{cp_t / unpack_t:>8.2f}"
          f"{unpack_rss:>14.1f}")
    print(f"{'  library: .wrp -> .wrpk':<34}{lib_pack:>9.3f}{mb / lib_pack:>9.0f}{cp_t / lib_pack:>8.2f}"
          f"{'(in process)':>14}")
    print(f"{'  library: .wrpk -> .wrp':<34}{lib_unpack:>9.3f}{mb / lib_unpack:>9.0f}{cp_t / lib_unpack:>8.2f}"
          f"{'(in process)':>14}")
    print(f"{'  floor: SHA-256 of the blobs':<34}{hash_t:>9.3f}{mb / hash_t:>9.0f}{cp_t / hash_t:>8.2f}"
          f"{'(one thread)':>14}")
    print(f"{'  floor: start Python, import CLI':<34}{startup_t:>9.3f}{'':>9}{'':>8}{'(CLI rows)':>14}")
    print(f"round trip byte-identical: {identical}   (target: >= 0.5x of cp's throughput; the CLI rows include "
          "starting Python and importing wrpkit)")
    print(f"{'load: stock wp.capture_load(.wrp)':<34}{stock_t:>9.3f}{'':>9}{'':>8}{stock_rss:>14.1f}")
    print(f"{'load: wrpkit.load(.wrpk)':<34}{mine_t:>9.3f}{'':>9}{stock_t / mine_t:>7.2f}x{mine_rss:>14.1f}")
    print(f"{'  wrpkit.load, in process':<34}{mine_in:>9.3f}{'':>9}{stock_in / mine_in:>7.2f}x"
          f"  (stock {stock_in:.3f} s; Warp already imported and started)")
    print("(load ratio = stock time / wrpkit time; target >= 1x; fresh processes include importing Warp, "
          "runs interleaved)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
