"""Replays that scale with the capture: wall time and memory against `cat` and stock Warp, in one run.

For a capture holding one initialised float32 array of each size (256 MiB and
1 GiB by default; ``--sizes 256,1024,4096`` adds 4 GiB where disk and memory
allow), made with stock ``wp.capture_save`` and bundled with ``wrp convert``:

* wall seconds and peak memory summed over the process tree (anonymous plus
  shared memory of every process, sampled from ``/proc`` every 10 ms) of
  ``cat``, stock ``capture_load`` + ``capture_launch``, ``wrp-replay`` (.wrp,
  .wrpk, a container-version-1 .wrpk, a .wrpk without chunk digests, ``--list``), ``wrpkit.load().run()`` (.wrp
  and .wrpk), ``wrp replay`` by default (``--engine auto``) and on both engines named (.wrp and .wrpk)
  and ``wrp inspect``;
  each as a ratio to ``wrp-replay big.wrp`` (wall) and to the capture's data
  (memory); ``--reps N`` runs every row N times, interleaved, and shows medians;
* the slope of each row (seconds per GiB, least squares over the sizes);
* ``Program.run()`` with its default outputs against ``launch()`` plus reading
  the outputs, in one process;
* the C API with 4 threads driving 4 programs: median run time and p99 of the
  time a call takes (waiting for the lock included), against 2 x median x threads.

Usage::

    python bench/bench_scale.py [--sizes 256,1024] [--dir /tmp/wrpkit-scale] [--threads-runs 400]
                                [--reps 3] [--only "wrp-replay,wrp replay"]

Nothing here asserts on timings; the tests never time anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BIN = Path(PY).parent

MAKE = r"""
import sys, numpy as np, warp as wp
wp.config.quiet = True
n = int(sys.argv[2]) * (1 << 20) // 4
@wp.kernel
def scale(a: wp.array(dtype=wp.float32)):
    i = wp.tid()
    a[i] = a[i] * 2.0 + 1.0
a = wp.empty(n, dtype=wp.float32, device="cpu")
v = a.numpy()  # a view of Warp's memory: filled in slices, so making the capture costs one copy of it
for i in range(0, n, 1 << 24):
    j = min(n, i + (1 << 24))
    v[i:j] = (np.arange(i, j, dtype=np.int64) % 1000).astype(np.float32)
wp.capture_begin(device="cpu", apic=True)
wp.launch(scale, dim=n, inputs=[a], device="cpu")
g = wp.capture_end(device="cpu")
wp.capture_save(g, sys.argv[1], inputs={"a": a})
"""

STOCK = r"""
import sys, warp as wp
wp.config.quiet = True
g = wp.capture_load(sys.argv[1], device="cpu")
wp.capture_launch(g)
"""

LOAD_RUN = r"""
import sys, wrpkit
wrpkit.load(sys.argv[1]).run()
"""

# The previous bundle layout (container version 1: every blob 64-byte aligned), for comparison.
CONVERT_V1 = r"""
import sys
from wrpkit.formats.container import open_capture
from wrpkit.formats.wrpk import builder
with open_capture(sys.argv[1]) as cap:
    builder.write_wrpk(sys.argv[2], cap.program, cap.module_files(), container_version=1, durable=False)
"""

# A bundle without chunk digests (Blob.chunk_sha256, what every wrpkit before them wrote): its
# region data is verified whole, on one hasher thread.
CONVERT_PLAIN = r"""
import sys
from wrpkit.formats.container import open_capture
from wrpkit.formats.wrpk import builder
with open_capture(sys.argv[1]) as cap:
    builder.write_wrpk(sys.argv[2], cap.program, cap.module_files(), digest_chunk=0, durable=False)
"""

RUN_VS_LAUNCH = r"""
import sys, time, json, numpy as np, wrpkit
prog = wrpkit.load(sys.argv[1])
reps = int(sys.argv[2])
def best(f):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return min(ts)
launch = best(prog.launch)
launch_read = best(lambda: (prog.launch(), [prog.get(n) for n in prog.outputs]))
run = best(prog.run)
run_view = best(lambda: prog.run(copy=False))
print(json.dumps({"launch": launch, "launch_read": launch_read, "run": run, "run_view": run_view}))
"""

THREADS_CPP = r"""
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
#include "wrp_replay.h"
int main(int argc, char** argv)
{
    const int threads = 4, runs = std::atoi(argv[2]);
    std::vector<wrp_program*> progs(threads);
    for (auto& p : progs) {
        wrp_options o; wrp_options_init(&o); o.device = "cpu";
        if (wrp_program_open(argv[1], &o, &p) != WRP_OK) { std::printf("%s\n", wrp_last_error()); return 1; }
    }
    std::vector<std::vector<double>> calls(threads), alone(1);
    for (auto p : progs)  // warm: first runs fault pages in
        for (int i = 0; i < 20; i++) wrp_program_run(p, 1);
    for (int i = 0; i < runs; i++) {  // one thread alone: the run time itself, and the machine's own jitter
        auto t0 = std::chrono::steady_clock::now();
        wrp_program_run(progs[0], 1);
        alone[0].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++)
        ts.emplace_back([&, t] {
            for (int i = 0; i < runs; i++) {
                auto t0 = std::chrono::steady_clock::now();
                wrp_program_run(progs[t], 1);
                calls[t].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            }
        });
    for (auto& t : ts) t.join();
    std::vector<double> all;
    for (auto& c : calls) all.insert(all.end(), c.begin(), c.end());
    std::sort(all.begin(), all.end());
    std::sort(alone[0].begin(), alone[0].end());
    std::printf("{\"median_run_ms\": %.6f, \"p99_run_ms\": %.6f, \"median_call_ms\": %.6f, \"p99_call_ms\": %.6f, "
                "\"max_call_ms\": %.6f}\n", alone[0][alone[0].size() / 2], alone[0][alone[0].size() * 99 / 100],
                all[all.size() / 2], all[all.size() * 99 / 100], all.back());
    for (auto p : progs) wrp_program_destroy(p);
    return 0;
}
"""


def _tree_memory(pid: int) -> int:
    """Anonymous plus shared-memory bytes of ``pid`` and every descendant (from /proc)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith(("RssAnon:", "RssShmem:")):
                        total += int(line.split()[1]) * 1024
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def measure(cmd: list, env=None) -> tuple:
    """``(wall seconds, peak memory summed over the process tree)`` of one run of ``cmd``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_memory(proc.pid))
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {err[-2000:]}")
    return wall, peak


def _exe(name: str) -> str:
    p = BIN / name
    return str(p) if p.exists() else shutil.which(name) or name


def _writes_disk(label: str) -> bool:
    """Whether a row writes to disk (its writeback would slow the rows run after it)."""
    return "--output" in label or label.startswith("cp ")


def rows_for(wrp: Path, wrpk: Path, wrpk_v1: Path, wrpk_plain: Path) -> list:
    """``[(label, command)]`` of the measured commands."""
    wrp_cmd, native = _exe("wrp"), _exe("wrp-replay")
    return [
        ("cat big.wrp", ["sh", "-c", f"cat '{wrp}' > /dev/null"]),
        ("stock capture_load + capture_launch", [PY, "-c", STOCK, str(wrp)]),
        ("wrp-replay big.wrp", [native, str(wrp)]),
        ("wrp-replay big.wrpk", [native, str(wrpk)]),
        ("wrp-replay big.wrpk (container v1)", [native, str(wrpk_v1)]),
        ("wrp-replay big.wrpk (no chunk digests)", [native, str(wrpk_plain)]),
        ("wrpkit.load(.wrpk).run()", [PY, "-c", LOAD_RUN, str(wrpk)]),
        ("wrpkit.load(.wrpk no chunk digests).run()", [PY, "-c", LOAD_RUN, str(wrpk_plain)]),
        ("wrp-replay big.wrpk --list", [native, str(wrpk), "--list"]),
        ("wrp-replay big.wrpk --list --verify", [native, str(wrpk), "--list", "--verify"]),
        ("wrp-replay --list --verify (no chunk digests)", [native, str(wrpk_plain), "--list", "--verify"]),
        ("wrpkit.load(.wrp).run()", [PY, "-c", LOAD_RUN, str(wrp)]),
        # the default route (--engine auto: the native engine here), then each engine named
        ("wrp replay big.wrp (default)", [wrp_cmd, "replay", str(wrp)]),
        ("wrp replay big.wrpk (default)", [wrp_cmd, "replay", str(wrpk)]),
        ("wrp replay big.wrp --engine python", [wrp_cmd, "replay", str(wrp), "--engine", "python"]),
        ("wrp replay big.wrpk --engine python", [wrp_cmd, "replay", str(wrpk), "--engine", "python"]),
        ("wrp replay big.wrp --engine native", [wrp_cmd, "replay", str(wrp), "--engine", "native"]),
        ("wrp replay big.wrpk --engine native", [wrp_cmd, "replay", str(wrpk), "--engine", "native"]),
        # --output: the outputs written to disk (fsynced), against cp writing the same bytes (not synced)
        ("cp big.wrp", ["cp", str(wrp), str(wrp.with_name("out_cp.wrp"))]),
        ("wrp-replay big.wrp --output", [native, str(wrp), "--output", f"a={wrp.with_name('out_native.npy')}"]),
        ("wrp replay big.wrp --output (default)", [wrp_cmd, "replay", str(wrp), "--output",
                                                   str(wrp.with_name("out_default.npz"))]),
        ("wrp replay big.wrp --output --engine python", [wrp_cmd, "replay", str(wrp), "--engine", "python",
                                                         "--output", str(wrp.with_name("out_python.npz"))]),
        ("wrp replay big.wrp --output --engine native", [wrp_cmd, "replay", str(wrp), "--engine", "native",
                                                         "--output", str(wrp.with_name("out_engine.npz"))]),
        ("wrp inspect big.wrp", [wrp_cmd, "inspect", str(wrp)]),
        ("wrp inspect big.wrpk", [wrp_cmd, "inspect", str(wrpk)]),
    ]


def make_capture(path: Path, mib: int) -> None:
    """A stock capture holding one initialised float32 array of ``mib`` MiB (Warp kernels need a source file)."""
    script = path.parent / "make_capture.py"
    script.write_text(MAKE)
    subprocess.run([PY, str(script), str(path), str(mib)], check=True, capture_output=True)


def _slope(xs: list, ys: list) -> float:
    if len(xs) < 2:
        return float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def bench_threads(wrp: Path, runs: int, work: Path) -> None:
    native = next(Path(sys.prefix).glob("lib/python*/site-packages/wrpkit/_native"), None)
    if native is None or shutil.which("c++") is None:
        print("C API threads: skipped (no installed wrpkit/_native or no C++ compiler)")
        return
    src = work / "threads.cpp"
    src.write_text(THREADS_CPP)
    exe = work / "threads"
    subprocess.run(["c++", "-O2", "-std=c++17", str(src), "-o", str(exe), f"-I{native}/include", f"-L{native}/lib",
                    f"-Wl,-rpath,{native}/lib", "-lwrp_replay", "-lpthread"], check=True)
    import warp  # noqa: PLC0415

    env = dict(os.environ, WRP_WARP_LIB_DIR=str(Path(warp.__file__).parent / "bin"))
    # /usr/bin/time counts the context switches: a hand-over that wakes every waiter shows as more
    # than one voluntary switch per call.
    timer = ["/usr/bin/time", "-f", "switches %w %c"] if Path("/usr/bin/time").exists() else []
    out = subprocess.run(timer + [str(exe), str(wrp), str(runs)], capture_output=True, text=True, env=env,
                         check=True)
    r = json.loads(out.stdout)
    bound = 2 * r["median_run_ms"] * 4
    switches = [ln.split() for ln in out.stderr.splitlines() if ln.startswith("switches ")]
    per_call = ""
    if switches:
        calls = 4 * runs + runs + 4 * 20
        per_call = (f"; context switches per call: {int(switches[-1][1]) / calls:.2f} voluntary, "
                    f"{int(switches[-1][2]) / calls:.2f} involuntary")
    print(f"C API, 4 threads x 4 programs x {runs} runs of {wrp.name}: median run {r['median_run_ms']:.3f} ms, "
          f"median call {r['median_call_ms']:.3f} ms, p99 call {r['p99_call_ms']:.3f} ms, "
          f"max {r['max_call_ms']:.3f} ms; p99 / (2 x median x 4) = {r['p99_call_ms'] / bound:.2f} (target <= 1)"
          f"{per_call}; load average {os.getloadavg()[0]:.1f}")
    # A run alone has a tail of its own (page faults, the host taking the core): beside the
    # lock's p99, so that a reader can tell the machine's jitter from the lock's waiting.
    print(f"  one thread alone, {runs} runs: p99 run {r['p99_run_ms']:.3f} ms "
          f"({r['p99_run_ms'] / max(r['median_run_ms'], 1e-9):.1f}x its median)")


def main() -> None:
    from as_installed import cache_bytecode  # noqa: PLC0415  (here: tests import this file for its sampler)

    cache_bytecode()  # measure wrpkit as an install runs it (bench/as_installed.py)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,1024", help="MiB per capture, comma-separated (4096 is opt-in)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "wrpkit-scale")
    ap.add_argument("--threads-runs", type=int, default=400)
    ap.add_argument("--run-reps", type=int, default=5)
    ap.add_argument("--reps", type=int, default=1,
                    help="rounds of every row, interleaved; the table shows each row's median round")
    ap.add_argument("--only", default="", help="comma-separated substrings: measure only rows whose label has one "
                                               "(wrp-replay big.wrp always runs: it is the base)")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    table = {}
    for mib in sizes:
        wrp, wrpk, wrpk_v1 = a.dir / f"big{mib}.wrp", a.dir / f"big{mib}.wrpk", a.dir / f"big{mib}_v1.wrpk"
        wrpk_plain = a.dir / f"big{mib}_plain.wrpk"
        if not wrp.exists():
            make_capture(wrp, mib)
        if not wrpk.exists():
            subprocess.run([_exe("wrp"), "convert", str(wrp), str(wrpk)], check=True, capture_output=True)
        if not wrpk_v1.exists():
            subprocess.run([PY, "-c", CONVERT_V1, str(wrp), str(wrpk_v1)], check=True, capture_output=True)
        if not wrpk_plain.exists():
            subprocess.run([PY, "-c", CONVERT_PLAIN, str(wrp), str(wrpk_plain)], check=True, capture_output=True)
        rows = rows_for(wrp, wrpk, wrpk_v1, wrpk_plain)
        if a.only:
            keep = [w for w in a.only.split(",") if w]
            rows = [r for r in rows if r[0] == "wrp-replay big.wrp" or any(w in r[0] for w in keep)]
        for _, cmd in rows:  # warm the page cache and the kernel cache; not measured
            if "cat" in cmd[-1] or cmd[0] == "sh":
                measure(cmd)
        measure([_exe("wrp-replay"), str(wrp)])
        # Rows that write to disk (--output, cp) are measured after the others, in rounds of their own:
        # interleaved with them, their writeback slowed whatever ran next.
        writes = [r for r in rows if _writes_disk(r[0])]
        rounds = [{label: measure(cmd) for label, cmd in rows if not _writes_disk(label)} for _ in range(a.reps)]
        rounds = [dict(r, **{label: measure(cmd) for label, cmd in writes}) for r in rounds]
        for written in a.dir.glob("out_*"):  # the --output rows' files: not kept beside the captures
            written.unlink()
        table[mib] = {label: (statistics.median(r[label][0] for r in rounds),
                              statistics.median(r[label][1] for r in rounds)) for label, _ in rows}
        print(f"\n(load average {os.getloadavg()[0]:.1f}, {a.reps} interleaved round(s), medians)")
        data = mib << 20
        base = table[mib]["wrp-replay big.wrp"][0]
        print(f"\n== {mib} MiB of data ({wrp.stat().st_size} bytes .wrp)")
        print(f"{'command':40s} {'wall s':>8s} {'x wrp-replay':>12s} {'memory MiB':>10s} {'x data':>7s}")
        for label, (wall, mem) in table[mib].items():
            print(f"{label:40s} {wall:8.3f} {wall / base:12.2f} {mem / (1 << 20):10.1f} {mem / data:7.2f}")
        if a.only:
            continue
        out = subprocess.run([PY, "-c", RUN_VS_LAUNCH, str(wrp), str(a.run_reps)], capture_output=True, text=True,
                             check=True)
        rv = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"Program.run() default outputs {rv['run']:.4f} s against launch()+reading the outputs "
              f"{rv['launch_read']:.4f} s: {rv['run'] / rv['launch_read']:.2f}x (target <= 1.1); launch() alone "
              f"{rv['launch']:.4f} s; run(copy=False) {rv['run_view']:.4f} s")
    if len(sizes) > 1:
        print("\nslope (seconds per GiB, least squares over the sizes) and wall ratio largest/smallest against "
              "the size ratio:")
        gib = [s / 1024 for s in sizes]
        for label in table[sizes[0]]:
            ys = [table[s][label][0] for s in sizes]
            print(f"  {label:40s} {_slope(gib, ys):8.3f} s/GiB  {ys[-1] / ys[0]:6.2f}x for {sizes[-1] / sizes[0]:.0f}x")
    if a.only:
        return
    small = a.dir / "small1.wrp"  # a short replay (1 MiB): the lock's hand-over is what is measured
    if not small.exists():
        make_capture(small, 1)
    bench_threads(small, a.threads_runs, a.dir)


if __name__ == "__main__":
    main()
