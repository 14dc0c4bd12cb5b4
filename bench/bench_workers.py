"""A ``Program`` on workers: the README's Dask and Ray recipes against the best pattern.

The documented recipes should run at 90% or more of the best pattern's
throughput.  For the bundled particles sample (``samples/particles.py``:
13 launches and a memset over 256 particles, captured with stock Warp), in
one run, on 2 worker processes:

Dask (a real ``LocalCluster`` on 127.0.0.1, 2 workers x 1 thread):
  per-task   ``client.submit(step, prog, x)``: the Program pickled into every task;
  scatter    ``client.scatter(prog, broadcast=True)`` once, then tasks
             (docs/scale.md's recipe);
Ray (``ray.init(num_cpus=2)``, where Ray installs: ``pip install 'wrpkit[ray]'``):
  task       ``ref = ray.put(prog)``, then ``step.remote(ref, x)``;
  actor      2 actors that each load the Program once (docs/scale.md's recipe).

Each pattern: a warm-up round (workers start, Warp loads), then ``--rounds``
timed rounds of ``--tasks`` tasks; the median round gives runs per second.
Usage::

    python bench/bench_workers.py [--tasks 400] [--rounds 3] [--no-ray] [--no-dask]

Nothing here asserts on timings; the tests never time anything.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import wrpkit  # noqa: E402
from as_installed import cache_bytecode  # noqa: E402  (bench/ is on sys.path)

SAMPLE = ROOT / "samples" / "particles.py"


def make_capture(folder: Path) -> tuple:
    """Capture the bundled particles sample (13 launches, 1 memset) with stock Warp; return (path, positions)."""
    import subprocess  # noqa: PLC0415

    subprocess.run([sys.executable, str(SAMPLE), str(folder)], check=True, capture_output=True)
    with np.load(folder / "particles_inputs.npz") as z:
        return folder / "particles.wrp", z["positions"]


def step(prog, x):
    """One task: a run from the captured state with new positions (a Program unpickled for it)."""
    return prog.run({"positions": x})["positions"]


def shared_step(prog, x):
    """One task on a Program that other tasks share: reset to the captured state, atomically."""
    return prog.run({"positions": x}, reset=True)["positions"]


def rate(round_fn, tasks: int, rounds: int) -> float:
    """Runs per second of the median of ``rounds`` timed rounds, after one warm-up round."""
    round_fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        round_fn()
        times.append(time.perf_counter() - t0)
    return tasks / statistics.median(times)


def bench_dask(wrp: Path, inputs: list, rounds: int) -> dict:
    from distributed import Client, LocalCluster  # noqa: PLC0415

    prog = wrpkit.load(wrp)
    out = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None, processes=True) as cluster, Client(cluster) as client:
        out["per-task"] = rate(lambda: client.gather(
            [client.submit(step, prog, x, pure=False) for x in inputs]), len(inputs), rounds)
        shared = client.scatter(prog, broadcast=True)
        out["scatter"] = rate(lambda: client.gather(
            [client.submit(shared_step, shared, x, pure=False) for x in inputs]), len(inputs), rounds)
    return out


def bench_ray(wrp: Path, inputs: list, rounds: int) -> dict:
    import ray  # noqa: PLC0415

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        prog = wrpkit.load(wrp)
        step_task = ray.remote(step)
        ref = ray.put(prog)
        out = {"task": rate(lambda: ray.get([step_task.remote(ref, x) for x in inputs]),
                              len(inputs), rounds)}

        @ray.remote
        class Stepper:
            def __init__(self, bundle):
                self.prog = bundle

            def step(self, x):
                return shared_step(self.prog, x)

        actors = [Stepper.remote(ref) for _ in range(2)]
        out["actor"] = rate(lambda: ray.get(
            [actors[i % 2].step.remote(x) for i, x in enumerate(inputs)]), len(inputs), rounds)
        return out
    finally:
        ray.shutdown()


def main() -> None:
    cache_bytecode()  # measure wrpkit as an install runs it (bench/as_installed.py)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        wrp, positions = make_capture(Path(tmp))
        inputs = [(positions + rng.standard_normal(positions.shape)).astype(positions.dtype)
                  for _ in range(args.tasks)]
        print(f"{args.tasks} tasks per round, median of {args.rounds} rounds, 2 workers")
        results = {}
        if not args.no_dask:
            results["dask"] = bench_dask(wrp, inputs, args.rounds)
        if not args.no_ray:
            try:
                import ray  # noqa: F401, PLC0415
            except ImportError:
                print("ray: not installed (pip install 'wrpkit[ray]'); skipped")
            else:
                results["ray"] = bench_ray(wrp, inputs, args.rounds)
        for name, rows in results.items():
            best = max(rows.values())
            for pattern, r in rows.items():
                print(f"{name:5s} {pattern:8s} {r:8.1f} runs/s  {r / best:5.2f} of best")


if __name__ == "__main__":
    main()
