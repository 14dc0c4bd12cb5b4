"""Benchmark: the C++ replayer (`wrp-replay`) against the Python route, in one run.

* Cold start to a finished replay of a small sample (saxpy), each run a fresh
  process: ``wrp-replay saxpy.wrp`` against
  ``python -c "import warp; g = warp.capture_load(...); warp.capture_launch(g)"``
  (target: wrp-replay at least 10x faster).
* Per-op replay cost on a 10,000-launch CPU graph: wrp-replay's median replay
  time (``--repeat``, ``--json``) against Warp's own replay
  (``wp.capture_launch`` of the same file loaded by ``wp.capture_load``), each
  divided by the number of launches (target: at most 1.1x).

Usage: python bench/bench_native.py [--wrp-replay PATH] [--dir DIR] [--runs R] [--repeat N]
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
from as_installed import cache_bytecode  # noqa: E402  (bench/ is on sys.path)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "samples"))


def find_wrp_replay(given):
    for cand in (given, Path(sys.executable).parent / "wrp-replay", shutil.which("wrp-replay")):
        if cand and Path(cand).is_file():
            return str(cand)
    build = Path(tempfile.mkdtemp(prefix="wrpkit-native-bench-"))
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "-j2", "--target", "wrp-replay"], check=True,
                   stdout=subprocess.DEVNULL)
    return str(next(build.rglob("wrp-replay")))


def wall(cmd, env=None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t0


def main() -> int:
    cache_bytecode()  # measure wrpkit as an install runs it (bench/as_installed.py)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wrp-replay", default=None)
    ap.add_argument("--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "wrpkit-bench")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    exe = find_wrp_replay(a.wrp_replay)

    import warp as wp

    wp.config.log_level = 40
    wp.init()
    import programs
    import saxpy

    small = saxpy.capture(a.dir / "native")
    big = a.dir / "native" / "launches_10k.wrp"
    programs.capture_to_file(programs.make_big(10_000, 1 << 20), big)
    warp_bin = str(Path(wp.__file__).parent / "bin")
    env = {"PATH": "/usr/bin:/bin", "WRP_WARP_LIB_DIR": warp_bin}

    native_cmd = [exe, str(small)]
    py_cmd = [sys.executable, "-c", f"import warp as wp; wp.config.log_level = 40; "
                                    f"g = wp.capture_load({str(small)!r}, device='cpu'); wp.capture_launch(g)"]
    wall(native_cmd, env)
    wall(py_cmd)
    native_cold = statistics.median(wall(native_cmd, env) for _ in range(a.runs))
    py_cold = statistics.median(wall(py_cmd) for _ in range(a.runs))

    out = subprocess.run([exe, str(big), "--repeat", str(a.repeat), "--warmup", "5", "--json"], check=True,
                         capture_output=True, text=True, env=env).stdout
    t = json.loads(out)["timings"]
    native_ms = t["median_ms"]

    g = wp.capture_load(str(big), device="cpu")
    for _ in range(5):
        wp.capture_launch(g)
    times = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        wp.capture_launch(g)
        times.append((time.perf_counter() - t0) * 1e3)
    warp_ms = statistics.median(times)

    print(f"wrp-replay: {exe}; {os.cpu_count()} cores; median of {a.runs} cold starts, {a.repeat} replays")
    print(f"cold start to finished replay (saxpy): wrp-replay {native_cold * 1e3:.1f} ms, "
          f"python + warp {py_cold * 1e3:.1f} ms -> {py_cold / native_cold:.1f}x faster (target >= 10x)")
    print(f"replay of 10,000 launches: wrp-replay {native_ms:.3f} ms ({native_ms * 1e6 / 10000:.0f} ns/launch), "
          f"wp.capture_launch {warp_ms:.3f} ms ({warp_ms * 1e6 / 10000:.0f} ns/launch) -> "
          f"{native_ms / warp_ms:.3f}x (target <= 1.1x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
