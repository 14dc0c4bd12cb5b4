"""``wrp regress`` throughput: -j 2 and a two-worker Dask cluster against -j 1, and the per-case overhead.

Builds a suite of ``--cases`` small wrpkit captures (default 50; launch
sizes and constants vary, goldens from numpy), then runs ``wrp regress
SUITE --json`` as a user does, in a new process each time, in interleaved
rounds (``-j 1``, ``-j 2``, ``--dask``: each round runs each route once, so
all see the same machine), and reads the run's timeline from its JSON
records (each case's ``started``, ``worker_start_s`` and ``seconds``).
For each route, medians over the rounds of:

* start-up: from the moment this script starts the ``wrp regress``
  process to the first case's start in a warm replay child (the earliest
  ``started + worker_start_s``): Python, wrpkit's import, the scan of the
  suite and the zygote's ``import warp`` (for Dask: the client's connection
  and the first case's trip; the cluster's own start is reported apart);
* steady state: with ``w`` workers (1, 2, 2), the cases that ended after
  the ``w``-th case to end, over the time from that end to the last one:
  ``(n - w) / (end[n-1] - end[w-1])``, every worker busy and warm;
* whole run: ``n`` over the process's wall time, start to exit;
* a case's time in its worker (``seconds``), and the time a worker spends
  between two of its cases (what the parent, or Dask, adds to each).

The ratios of -j 2 and of Dask to -j 1 are printed for the steady state and
for the whole run (targets: -j 2 >= 1.7x, Dask >= 1.5x).  With ``s`` the
start-up and ``c`` a case's time at -j 1, ``T1 = s + n c`` and ``T2 = s + n
c / 2`` at best: the ceiling of the whole-run ratio for this ``n`` is
printed too.  Per-case overhead beyond the replay itself (target <= 150 ms):
a case's wall time in its worker (read the files, validate, load in the
warm child, replay, read back, compare) minus the replay's host time, from
the ``-j 1`` records with a warm worker.  The load average is printed before
and after, and how much faster two CPU-bound processes run side by side than
one after the other (:func:`two_at_once`): the most -j 2 can gain on the machine at that
moment.

Usage::

    python bench/bench_regress.py [--cases 50] [--rounds 5] [--no-dask] [--dask-config quiet|default] [--ray]

The Dask cluster lives through every round, so it idles beside the ``-j``
runs too.  With Dask's default settings its processes then take about 18%
of one core doing nothing (the event loops' 20 ms tick, each worker's
10 ms statistical profiler and 0.5 s system monitor, measured on the
2-core machine): CPU that ``-j 2`` and the Dask workers lack.  By default
the cluster is started with :data:`QUIET_DASK` (about 3% of a core idle),
the settings docs/regress.md advises for small machines;
``--dask-config default`` keeps Dask's own.

``--ray`` adds a route: a local Ray cluster of 2 CPUs, started here (its
start-up reported apart, as the Dask cluster's), that each run joins as a
new driver (``--ray GCS_ADDRESS``).  Ray starts a job's worker processes
for that job, so every Ray run's start-up includes its workers' start and
their zygotes' ``import warp``.  Skipped with a note where ray is not
importable.

Nothing here asserts on timings; the tests never time anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import warp as wp  # noqa: E402

wp.config.quiet = True
wp.config.log_level = getattr(wp, "LOG_WARNING", 0)

import wrpkit  # noqa: E402
from as_installed import cache_bytecode  # noqa: E402  (bench/ is on sys.path)


@wp.kernel
def k_poly(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32), a: float):
    i = wp.tid()
    y[i] = a * x[i] * x[i] + x[i]


#: Dask settings for a small machine (docs/regress.md): no statistical profiler, a 1 s event-loop tick,
#: a 2 s system monitor.  Nothing that runs or recovers tasks changes.
QUIET_DASK = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
              "distributed.admin.system-monitor.interval": "2s"}


def build_suite(d: Path, n: int) -> Path:
    for i in range(n):
        size = 256 * (1 + i % 8)
        a = 0.5 + 0.25 * (i % 5)
        x0 = np.linspace(-1, 1, size, dtype=np.float32)
        x = wp.array(x0, device="cpu")
        y = wp.zeros(size, dtype=wp.float32, device="cpu")
        with wrpkit.capture(device="cpu") as rec:
            wp.launch(k_poly, dim=size, inputs=[x, y, a], device="cpu")
        sub = d / f"group{i % 4}"
        sub.mkdir(parents=True, exist_ok=True)
        rec.save(sub / f"case{i:03d}.wrp", inputs={"x": x}, outputs={"y": y})
        xin = x0[::-1].copy()
        np.savez(sub / f"case{i:03d}_inputs.npz", x=xin)
        np.savez(sub / f"case{i:03d}_expected.npz", y=(np.float32(a) * xin * xin + xin).astype(np.float32))
    return d


def cpu_seconds() -> float:
    """CPU time (user + system) of the processes this one has waited for.

    A ``wrp regress`` process waits for its zygote, and the zygote for its
    forks, so a run's replay children count: the figure the machine's load
    does not change much, unlike the wall time.
    """
    import resource  # noqa: PLC0415

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def cluster_cpu() -> float:
    """CPU seconds so far of the clusters this process hosts: its own (a local Dask cluster's scheduler and
    nannies run in it) and every live process below it (worker processes, their zygotes and, through
    those, the replay children they reaped).  The ``wrp regress`` runs are not counted: by the time this is
    read they have ended, and only :func:`cpu_seconds` counts them."""
    import resource  # noqa: PLC0415

    me = resource.getrusage(resource.RUSAGE_SELF)
    total = me.ru_utime + me.ru_stime
    parent, ticks = {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(d)] = int(fields[1])
            ticks[int(d)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    root = os.getpid()
    for pid, n in ticks.items():
        q = pid
        while q in parent and q > 1 and q != root:
            q = parent[q]
        if q == root and pid != root:
            total += n / os.sysconf("SC_CLK_TCK")
    return total


def wrp_regress(suite: Path, *options: str) -> dict:
    """Run ``wrp regress SUITE --json OPTIONS`` in a new process: its report, wall time, CPU and timeline.

    Returns:
        ``{"report", "wall", "cpu", "cluster", "startup", "steady", "whole"}``:
        the JSON report, seconds from launch to exit, CPU seconds of the run's
        processes and of the clusters meanwhile (:func:`cluster_cpu`: for a
        Dask run its scheduler, workers and replay children; beside a ``-j``
        run, what the idle clusters took), start-up seconds, and cases per second in the steady state
        and over the whole run (see the module's documentation).
    """
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    env = dict(os.environ, WRP_NO_PROGRESS="1")
    cmd = [sys.executable, "-c", "import sys; from wrpkit.cli import main; sys.exit(main())", "regress",
           str(suite), "--json", *options]
    c0, k0 = cpu_seconds(), cluster_cpu()
    launched = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    ended = time.time()
    cpu, cluster = cpu_seconds() - c0, cluster_cpu() - k0
    report = json.loads(out.stdout)
    if "cases" not in report or report["counts"]["pass"] != len(report["cases"]):
        raise SystemExit(f"wrp regress {' '.join(options)} did not pass every case: {out.stdout[:2000]}"
                         f"{out.stderr[-2000:]}")
    cases = report["cases"]
    n = len(cases)
    workers = 1 if not options else 2
    begins = [c["started"] + c["worker_start_s"] for c in cases]
    ends = sorted(b + c["seconds"] for b, c in zip(begins, cases))
    steady = (n - workers) / (ends[-1] - ends[workers - 1])
    # The time a worker spends between two of its cases: what the parent (or Dask) adds to each.
    by_worker = {}
    for b, c in zip(begins, cases):
        by_worker.setdefault(c["worker"], []).append((c["started"], b + c["seconds"]))
    gaps = [nxt[0] - prev[1] for runs in by_worker.values() for prev, nxt in zip(sorted(runs), sorted(runs)[1:])]
    return {"report": report, "wall": ended - launched, "cpu": cpu, "cluster": cluster, "startup": min(begins) - launched,
            "steady": steady, "whole": n / (ended - launched), "gap": statistics.median(gaps) if gaps else 0.0,
            "case": statistics.median(c["seconds"] for c in cases)}


def two_at_once() -> float:
    """How much faster this machine runs two CPU-bound processes side by side than one after the other.

    The most any ``-j 2`` can gain here now: 2.0 on two free cores, about
    1.0 when other work takes one of them.
    """
    import subprocess  # noqa: PLC0415

    cmd = [sys.executable, "-c", "x = 0\nfor i in range(2_000_000): x += i * i"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    subprocess.run(cmd, check=True)
    one_by_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd) for _ in range(2)]
    for p in procs:
        p.wait()
    return one_by_one / (time.perf_counter() - t0)


def _med(runs: list, key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _line(name: str, runs: list, base: list = None) -> str:
    text = (f"{name:7} start-up {_med(runs, 'startup'):5.2f} s  steady {_med(runs, 'steady'):6.1f} cases/s  "
            f"whole run {_med(runs, 'whole'):5.1f} cases/s ({_med(runs, 'wall'):.2f} s)  "
            f"CPU {_med(runs, 'cpu'):.2f} s, the clusters' beside it {_med(runs, 'cluster'):.2f} s\n{'':7} a case in its worker {_med(runs, 'case') * 1e3:.1f} ms, "
            f"between a worker's cases {_med(runs, 'gap') * 1e3:.2f} ms")
    if base is not None:
        text += (f"\n{'':7} ratio to -j 1: steady {_med(runs, 'steady') / _med(base, 'steady'):.2f}x, "
                 f"whole run {_med(runs, 'whole') / _med(base, 'whole'):.2f}x")
    return text


def main() -> None:
    cache_bytecode()  # measure wrpkit as an install runs it (bench/as_installed.py)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of -j 1, -j 2 (and Dask)")
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--dask-config", choices=("quiet", "default"), default="quiet",
                    help="the Dask cluster's settings: QUIET_DASK (default) or Dask's own")
    ap.add_argument("--ray", action="store_true", help="also a local 2-CPU Ray cluster")
    args = ap.parse_args()
    print(f"load average before: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    cluster = ray = None
    with tempfile.TemporaryDirectory(prefix="bench-regress-") as tmp:
        suite = build_suite(Path(tmp) / "suite", args.cases)
        n = args.cases
        routes = {"-j 1": (), "-j 2": ("-j", "2")}
        if not args.no_dask:
            try:
                from distributed import LocalCluster  # noqa: PLC0415
            except ImportError:
                print("dask skipped: distributed is not installed (pip install 'wrpkit[dask]')")
            else:
                import dask  # noqa: PLC0415

                t0 = time.perf_counter()
                with dask.config.set(QUIET_DASK if args.dask_config == "quiet" else {}):
                    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                           dashboard_address=None, silence_logs=40)
                print(f"dask cluster (2 worker processes, 1 thread each, {args.dask_config} settings"
                      f"{': ' + str(QUIET_DASK) if args.dask_config == 'quiet' else ''}) start-up "
                      f"{time.perf_counter() - t0:.2f} s (reported apart)")
                routes["dask"] = ("--dask", cluster.scheduler_address)
                first = wrp_regress(suite, *routes["dask"])
                print(f"dask first run (its workers start their replay children): start-up "
                      f"{first['startup']:.2f} s, whole run {first['whole']:.1f} cases/s ({first['wall']:.2f} s); "
                      f"not in the medians")
        if args.ray:
            try:
                import ray  # noqa: PLC0415
            except ImportError:
                print("ray skipped: ray is not importable here (pip install 'wrpkit[ray]')")
                ray = None
            else:
                t0 = time.perf_counter()
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                         logging_level="ERROR")
                print(f"ray cluster (2 CPUs) start-up {time.perf_counter() - t0:.2f} s (reported apart)")
                routes["ray"] = ("--ray", ray.get_runtime_context().gcs_address)
                first = wrp_regress(suite, *routes["ray"])
                print(f"ray first run: start-up {first['startup']:.2f} s, whole run {first['whole']:.1f} cases/s "
                      f"({first['wall']:.2f} s); not in the medians")
        try:
            runs = {name: [] for name in routes}
            pairs = []
            for _ in range(args.rounds):  # interleaved, so every route sees the same machine
                pairs.append(two_at_once())
                for name, options in routes.items():
                    runs[name].append(wrp_regress(suite, *options))
        finally:
            if cluster is not None:
                cluster.close()
            if ray is not None:
                ray.shutdown()
        print(f"{n} cases, medians of {args.rounds} rounds; two CPU-bound processes side by side ran "
              f"{statistics.median(pairs):.2f}x as fast as one after the other ({', '.join(f'{x:.2f}' for x in pairs)}):"
              f" the most -j 2 could gain here")
        base = runs["-j 1"]
        print(_line("-j 1", base))
        print(_line("-j 2", runs["-j 2"], base) + "  (target >= 1.7x)")
        if "dask" in runs:
            print(_line("dask", runs["dask"], base) + "  (target >= 1.5x)")
        if "ray" in runs:
            print(_line("ray", runs["ray"], base) + "  (no target; start-up includes its workers' start)")
        s, c = _med(base, "startup"), 1 / _med(base, "steady")
        print(f"        whole-run ceiling at s {s:.2f} s, c {c * 1e3:.1f} ms, {n} cases, 2 perfect workers: "
              f"{(s + n * c) / (s + n * c / 2):.2f}x")

        # Per-case overhead beyond the replay, from the last -j 1 run: every case after the first is warm.
        warm = [c for c in base[-1]["report"]["cases"] if c["worker_start_s"] == 0]
        over = sorted(c["seconds"] - (c["replay_ms"] or 0) / 1e3 for c in warm)
        print(f"per case with a warm worker ({len(warm)} cases): in worker median "
              f"{statistics.median(c['seconds'] for c in warm) * 1e3:.1f} ms; replay itself median "
              f"{statistics.median(c['replay_ms'] or 0 for c in warm):.3f} ms; overhead beyond the replay median "
              f"{statistics.median(over) * 1e3:.1f} ms, p90 {over[int(0.9 * (len(over) - 1))] * 1e3:.1f} ms "
              f"(target <= 150 ms)")
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
