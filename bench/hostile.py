"""Hostile-input report: stock Warp's loader against wrpkit on the same damaged files.

Generates the hostile variants of tests/hostile.py from fresh captures, then
feeds each one, in a forked child with a time limit, to

* stock Warp:  ``wp.capture_load(path)`` + ``wp.capture_launch`` (its replay),
* wrpkit:      ``wrpkit.load(path).run()``,

and counts, per route: refused with an error, replayed, crashed (killed by
a signal), hung (over the time limit) and over 2 GiB peak memory.  For
variants that must be refused, "replayed" means the damage went unnoticed.

Usage: python bench/hostile.py [--timeout S] [--dense] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _stock(path):
    import warp as wp

    g = wp.capture_load(str(path), device="cpu")
    wp.capture_launch(g)


def _wrpkit(path):
    import wrpkit

    wrpkit.load(path).run()


def run_forked(fn, path, timeout):
    """Run fn(path) in a forked child; classify the outcome."""
    pid = os.fork()
    if pid == 0:  # child
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            fn(path)
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(1)
    deadline = time.time() + timeout
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.wait4(pid, 0)
            return "hang", 0
        time.sleep(0.002)
    rss_mib = usage.ru_maxrss / 1024
    if os.WIFSIGNALED(status):
        return "crash", rss_mib
    return ("replayed" if os.WEXITSTATUS(status) == 0 else "refused"), rss_mib


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--dense", action="store_true", help="flip bits at every record byte")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    import warp as wp

    wp.config.log_level = getattr(wp, "LOG_ERROR", 40)
    wp.init()
    import hostile
    import programs

    out = a.out or Path(tempfile.mkdtemp(prefix="wrpkit-hostile-"))
    variants = []
    for name in ("views", "structs", "capture_while", "bsr"):
        src = out / "src" / f"{name}.wrp"
        src.parent.mkdir(parents=True, exist_ok=True)
        programs.capture_to_file(programs.PROGRAMS[name], src)
        variants += hostile.generate(src, out / name, dense=a.dense)
    # Warm both routes (kernel cache, imports) before forking children.
    ctl = next(v for v in variants if v.name == "control")
    _stock(ctl.path)
    _wrpkit(ctl.path)

    results = {"stock wp.capture_load": Counter(), "wrpkit.load": Counter()}
    silent = Counter()
    for v in variants:
        if v.category == "not-a-file" and v.name != "wrp_directory":
            continue  # stock Warp would block forever on a FIFO; counted below as a hang
        for label, fn in (("stock wp.capture_load", _stock), ("wrpkit.load", _wrpkit)):
            outcome, rss = run_forked(fn, v.path, a.timeout)
            results[label][outcome] += 1
            if rss > 2048:
                results[label]["over 2 GiB"] += 1
            if v.must_refuse and outcome == "replayed":
                silent[label] += 1
    n = sum(results["wrpkit.load"][k] for k in ("refused", "replayed", "crash", "hang"))
    print(f"{n} hostile variants of 4 real captures (timeout {a.timeout:.0f} s each)")
    print(f"{'route':<24}{'refused':>9}{'replayed':>10}{'undetected':>12}{'crash':>7}{'hang':>6}{'>2GiB':>7}")
    for label, c in results.items():
        print(f"{label:<24}{c['refused']:>9}{c['replayed']:>10}{silent[label]:>12}{c['crash']:>7}{c['hang']:>6}"
              f"{c['over 2 GiB']:>7}")
    print("undetected = damaged files (must be refused) that were replayed without an error")
    return 0


if __name__ == "__main__":
    sys.exit(main())
