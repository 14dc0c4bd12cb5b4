"""Benchmark: `wrp profile` accuracy, coverage, per-op cost and scale, each against its baseline in the same run.

Reports, in one run:

* **Accuracy.** A capture of four launches of very unequal cost
  (``tests/profile_programs.py``: k_light, k_heavy 4000 steps per thread, k_vec 800,
  k_light) is profiled (one timed round, in this process), and each kernel is
  launched alone, live, just before; the two alternate ``--rounds`` times, with
  the wall clock and again with the thread's CPU time (``--clock cpu``: on a
  shared machine a 2 ms kernel is either not preempted or waits a whole time
  slice, which the wall clock cannot tell apart).  Each kernel's median share
  of the step in the profile against its median share of the live launches.
  Target: within 5 points.
* **Coverage.** The sum of per-op medians against the plain replay of the whole
  graph that the profile times in the same run (the unequal capture, the WHILE
  loop with IF bodies, 1,926 small launches in a WHILE with an IF, and the
  10,000-launch capture).  Target: within 10% on CPU.
  On the 10,000-launch capture it is taken apart: the whole replay per op, the
  empty-step floor, the launch floor, the group floor, the sum of ops (grouped)
  and the sum of the ops as stepped alone with either floor.
* **Cost.** On the 10,000-launch capture: the wall time of stepping one round
  (each op alone, then the group walk), minus the whole replay's time, per op:
  what the profiler adds beyond the ops themselves (control writes, the IF tree,
  the launch call, the clock, the IF/WHILE driving, the second walk).  Target: at most 20 us per op on CPU.
* **Scale.** ``wrp profile FILE -o OUT.json`` (fresh process; ``--repeat 1
  --warmup 0``, and the defaults) against ``wrp trace FILE`` of the same file,
  median wall time.  Target: at most 3x.  The ``-o`` file is checked against the
  trace-event format (JSON object form, complete events, nesting on one thread),
  then loaded in Chromium's DevTools Performance panel (``tests/devtools_trace.py``,
  offline): its load time, and how many of its complete events the panel draws.

Usage: python bench/bench_profile.py [--dir DIR] [--launches N] [--region-mib M] [--runs R] [--rounds K]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from bench_inspect import capture_bench_args, run_measured  # noqa: E402
from trace_event_rules import check_trace_event_file  # noqa: E402


def _shares(ms: dict) -> dict:
    total = sum(ms.values())
    return {k: v / total for k, v in ms.items()}


def main() -> int:
    a, big = capture_bench_args(__doc__, runs=3, extra=lambda ap: ap.add_argument("--rounds", type=int, default=15))

    import warp as wp  # noqa: PLC0415

    wp.config.quiet = True
    import profile_programs as pp  # noqa: PLC0415

    import wrpkit  # noqa: PLC0415

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    unequal = pp.capture_unequal(a.dir / "profile_unequal.wrp")
    while_if = pp.capture_while_if(a.dir / "profile_while_if.wrp")
    many_small = pp.capture_many_small(a.dir / "profile_many_small.wrp")

    # Accuracy: each kernel launched alone, live, then a profile, alternating closely (the profile in this
    # process, one timed round per call), with both clocks; medians of each kernel's share over the rounds.
    launches = pp.unequal_launches(pp.unequal_arrays())
    for k, args in launches:
        wp.launch(k, dim=pp.N, inputs=args, device="cpu")
    covs: dict = {}
    for clock, read in (("wall", time.perf_counter_ns), ("cpu", time.thread_time_ns)):
        prof_shares, live_shares = {}, {}
        for _ in range(a.rounds):
            live: dict = {}
            for k, args in launches:
                t0 = read()
                wp.launch(k, dim=pp.N, inputs=args, device="cpu")
                live[k.key] = live.get(k.key, 0.0) + (read() - t0) * 1e-6
            p = wrpkit.profile(unequal, repeat=1, warmup=0, clock=clock, isolate=False)
            covs.setdefault(("unequal kernels", clock), []).append(p.coverage)
            for k, v in _shares(live).items():
                live_shares.setdefault(k, []).append(v)
            for k in p.kernels:
                prof_shares.setdefault(k["name"], []).append(k["share"])
        print(f"accuracy, {clock} clock (share of the step; profile vs each kernel launched alone, live; medians of "
              f"{a.rounds} alternating rounds; target within 5 points):")
        worst = 0.0
        for k in sorted(live_shares, key=lambda k: -statistics.median(live_shares[k])):
            ps, ls = statistics.median(prof_shares[k]), statistics.median(live_shares[k])
            worst = max(worst, abs(ps - ls))
            print(f"  {k:<8} profile {100 * ps:6.2f}%  live {100 * ls:6.2f}%  difference {100 * (ps - ls):+.2f} points")
        print(f"  largest difference {100 * worst:.2f} points: {'met' if worst <= 0.05 else 'NOT met'}")

    # Coverage on the three captures (the profile's own whole replay, same clock, same run).
    for clock in ("wall", "cpu"):
        covs[("WHILE with IF bodies", clock)] = [wrpkit.profile(while_if, repeat=5, clock=clock).coverage
                                                 for _ in range(3)]
        covs[("small launches in WHILE", clock)] = [wrpkit.profile(many_small, repeat=5, clock=clock).coverage
                                                 for _ in range(3)]
    pb = wrpkit.profile(big, repeat=3)
    pbc = wrpkit.profile(big, repeat=3, clock="cpu")
    covs[(f"{a.launches}-launch capture", "wall")] = [pb.coverage]
    covs[(f"{a.launches}-launch capture", "cpu")] = [pbc.coverage]
    print("coverage (sum of per-op medians / whole replay in the same run, median of the calls; target within 10%):")
    for (name, clock), c in covs.items():
        c = statistics.median(c)
        print(f"  {name:<22} {clock:<4} clock {100 * c:6.1f}%  {'met' if abs(c - 1) <= 0.10 else 'NOT met'}")

    # Where the 10,000-launch capture's coverage goes: the wall replay against its CPU time (the load), and
    # the sum with the empty-step floor alone against the sum with the launch floor (stepping a launch).
    print(f"coverage on the {a.launches}-launch capture, taken apart (one call each clock, medians of 3 rounds):")
    for name, p in (("wall", pb), ("cpu", pbc)):
        only_empty = sum(max(0.0, o["raw_ms"] - p.floor_ms) for o in p.ops)
        alone = sum(max(0.0, o["raw_ms"] - (p.launch_floor_ms if o["kernel"] else p.floor_ms)) for o in p.ops)
        print(f"  {name:<4} clock: whole replay {p.replay_ms:.3f} ms ({p.replay_ms / len(p.ops) * 1e3:.3f} us per op); "
              f"empty step {p.floor_ms * 1e3:.3f} us, launch floor {p.launch_floor_ms * 1e3:.3f} us, group floor "
              f"{p.group_floor_ms * 1e3:.3f} us ({p.grouped_ops} op runs grouped); sum of ops {p.total_ms:.3f} ms "
              f"({100 * p.coverage:.0f}%); the ops stepped alone, less the launch floor, {alone:.3f} ms "
              f"({100 * alone / p.replay_ms:.0f}%), less the empty step {only_empty:.3f} ms "
              f"({100 * only_empty / p.replay_ms:.0f}%)")
    print(f"  load average now {os.getloadavg()[0]:.1f}")

    # Cost per op beyond the ops: stepping a round against the whole replay, per op run.
    n = len(pb.ops)
    step = statistics.median(pb.step_ms)
    over = (step - pb.replay_ms) / n * 1e3
    print(f"cost on the {a.launches}-launch capture: a stepped round (each op alone, then the group walk) "
          f"{step:.1f} ms against a whole replay "
          f"{pb.replay_ms:.2f} ms for {n} op runs: {over:.2f} us per op beyond the ops (target <= 20 us: "
          f"{'met' if over <= 20 else 'NOT met'}); empty step {pb.floor_ms * 1e3:.2f} us")

    # Scale: fresh processes, as a user runs them.
    out = a.dir / "profile_big.json"
    cmds = {"trace": [sys.executable, "-m", "wrpkit.cli", "trace", str(big)],
            "profile --repeat 1 --warmup 0": [sys.executable, "-m", "wrpkit.cli", "profile", str(big), "--repeat",
                                              "1", "--warmup", "0", "-o", str(out)],
            "profile (defaults: --repeat 5 --warmup 1)": [sys.executable, "-m", "wrpkit.cli", "profile", str(big),
                                                          "-o", str(out)]}
    walls = {k: [] for k in cmds}
    for k, cmd in cmds.items():
        run_measured(cmd)  # unmeasured first run: bytecode caches, page cache
    for _ in range(a.runs):
        for k, cmd in cmds.items():
            walls[k].append(run_measured(cmd)[0])
    t = statistics.median(walls["trace"])
    print(f"scale on the {a.launches}-launch capture (median of {a.runs}, fresh processes; target <= 3x wrp trace):")
    for k, w in walls.items():
        ratio = statistics.median(w) / t
        print(f"  {k:<42} {statistics.median(w):6.2f} s  {ratio:4.2f}x" + (
            "" if k == "trace" else f"  {'met' if ratio <= 3 else 'NOT met'}"))
    info = check_trace_event_file(out)
    print(f"  -o file: {info['bytes'] / 2**20:.1f} MiB, {info['events']} complete events ({info['ops']} op runs): "
          "valid trace-event JSON (tests/trace_event_rules.py: object form, strict JSON, "
          "complete events nested on one thread)")
    try:
        from devtools_trace import DevToolsLoadError, load_in_devtools  # noqa: PLC0415
    except ImportError as e:
        print(f"  -o file in Chromium's DevTools Performance panel: not run ({e})")
        return 0
    loads, drawn = [], None
    for _ in range(a.runs):
        try:
            dt = load_in_devtools(out, screenshot=a.dir / "profile_big_devtools.png", timeout=300)
        except (DevToolsLoadError, ImportError, OSError) as e:
            print(f"  -o file in Chromium's DevTools Performance panel: NOT loaded: {e}")
            return 1
        loads.append(dt["load_s"])
        drawn = dt
    print(f"  -o file in Chromium's DevTools Performance panel (Load profile; {a.runs} fresh browser(s)): "
          f"loaded in {statistics.median(loads):.2f} s median, no error; {drawn['raw_events']} events parsed, "
          f"{len(drawn['entries'])} of {info['events']} complete events drawn "
          f"({'met' if len(drawn['entries']) == info['events'] else 'NOT met'}; screenshot "
          f"{a.dir / 'profile_big_devtools.png'})")
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    rc = main()
    print(f"(bench took {time.perf_counter() - t0:.0f} s)")
    sys.exit(rc)
