"""What a bounds-checked replay costs: ``wrp memcheck`` against a plain replay of the same capture.

Two stock captures: a step of 96 launches of 6 kernels over small arrays (what memcheck is run on
while debugging), and one launch over one float32 array of ``--mib`` MiB (what the guard pages and
the op-by-op stepping cost with data).  Each is replayed whole by ``wrp replay`` (python engine),
stepped op by op by ``wrp trace`` (the other op-by-op tool), and checked by ``wrp memcheck``
(two passes: overrun and underrun), interleaved, ``--reps`` times; the table gives the medians of
wall seconds and of peak memory summed over the process tree, and each as a ratio to the replay.

Usage::

    python bench/bench_memcheck.py [--mib 256] [--reps 3] [--dir /tmp/wrpkit-memcheck]

Nothing here asserts on timings; the tests never time anything.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from as_installed import cache_bytecode  # noqa: E402
from bench_scale import PY, _exe, make_capture, measure  # noqa: E402

STEP = r"""
import sys, numpy as np, warp as wp
wp.config.quiet = True

@wp.kernel
def k0(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid(); b[i] = a[i] * 0.5 + 1.0
@wp.kernel
def k1(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid(); b[i] = b[i] - a[i] * 0.25
@wp.kernel
def k2(a: wp.array(dtype=float)):
    i = wp.tid(); a[i] = wp.sin(a[i])
@wp.kernel
def k3(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid(); a[i] = a[i] + b[(i + 1) % b.shape[0]]
@wp.kernel
def k4(a: wp.array(dtype=float), s: float):
    i = wp.tid(); a[i] = a[i] * s
@wp.kernel
def k5(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid(); b[i] = wp.max(a[i], b[i])

n = 4096
x = wp.array(np.linspace(0, 1, n, dtype=np.float32), device="cpu")
y = wp.zeros(n, dtype=float, device="cpu")
wp.load_module(device="cpu")
wp.capture_begin(device="cpu", apic=True)
for _ in range(16):
    wp.launch(k0, dim=n, inputs=[x, y]); wp.launch(k1, dim=n, inputs=[x, y]); wp.launch(k2, dim=n, inputs=[y])
    wp.launch(k3, dim=n, inputs=[x, y]); wp.launch(k4, dim=n, inputs=[x, 0.999]); wp.launch(k5, dim=n, inputs=[x, y])
g = wp.capture_end()
wp.capture_save(g, sys.argv[1], inputs={"x": x}, outputs={"y": y})
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="wrpkit-memcheck-"))
    work.mkdir(parents=True, exist_ok=True)
    cache_bytecode()
    step = work / "step96.wrp"
    (work / "make_step.py").write_text(STEP)
    subprocess.run([PY, str(work / "make_step.py"), str(step)], check=True, capture_output=True)
    big = work / f"big{args.mib}.wrp"
    make_capture(big, args.mib)
    cli = _exe("wrp")
    print(f"{'capture':<14} {'command':<14} {'wall s':>8} {'x replay':>9} {'peak MiB':>9} {'x replay':>9}")
    for f in (step, big):
        cmds = {"wrp replay": [cli, "replay", str(f), "--engine", "python"], "wrp trace": [cli, "trace", str(f)],
                "wrp memcheck": [cli, "memcheck", str(f)]}
        got = {k: [] for k in cmds}
        for _ in range(args.reps):
            for k, c in cmds.items():
                got[k].append(measure(c))
        base_t = statistics.median(t for t, _ in got["wrp replay"])
        base_m = statistics.median(m for _, m in got["wrp replay"])
        for k, runs in got.items():
            t = statistics.median(x for x, _ in runs)
            mem = statistics.median(x for _, x in runs)
            print(f"{f.name:<14} {k:<14} {t:8.2f} {t / base_t:9.2f} {mem / 2**20:9.0f} {mem / base_m:9.2f}")
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
