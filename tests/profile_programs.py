"""Programs for ``wrp profile``'s tests and bench: real Warp captures whose costs are known to differ.

Each ``capture_*`` function captures with stock Warp (through ``wrpkit.capture``) and
saves to the path given.  The kernels' costs are set by a loop count, so a live
launch of each kernel alone gives an independent measure of its share.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import warp as wp

import wrpkit


@wp.func
def churn(x: wp.float32, n: wp.int32) -> wp.float32:
    """``n`` dependent multiply-adds: the cost of a kernel grows with ``n``."""
    acc = x
    for _ in range(n):
        acc = acc * 0.999 + 0.001
    return acc


@wp.kernel
def k_heavy(src: wp.array(dtype=wp.float32), dst: wp.array(dtype=wp.float32), n: wp.int32):
    i = wp.tid()
    dst[i] = churn(src[i], n)


@wp.kernel
def k_light(src: wp.array(dtype=wp.float32), dst: wp.array(dtype=wp.float32)):
    i = wp.tid()
    dst[i] = src[i] + 1.0


@wp.kernel
def k_vec(pts: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.float32), n: wp.int32):
    i = wp.tid()
    p = pts[i]
    out[i] = churn(wp.length(p), n)


@wp.func
def nudge(p: wp.vec3, s: float) -> wp.vec3:
    return p * s + wp.vec3(0.1, 0.2, 0.3)


@wp.kernel
def k_move(pts: wp.array(dtype=wp.vec3), s: float):
    i = wp.tid()
    pts[i] = nudge(pts[i], s)


@wp.kernel
def k_count_down(counter: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] - 1
    flag[0] = counter[0] % 2  # odd iterations take the IF's then body


#: Threads of every launch.
N = 1024
#: Loop counts of the unequal program's kernels (the heavy one dominates).
HEAVY, MEDIUM = 4000, 800


def unequal_arrays(device="cpu") -> dict:
    rng = np.random.default_rng(3)
    return {"x": wp.array(rng.random(N, dtype=np.float32), device=device),
            "y": wp.zeros(N, dtype=wp.float32, device=device),
            "z": wp.zeros(N, dtype=wp.float32, device=device),
            "pts": wp.array(rng.random((N, 3), dtype=np.float32), dtype=wp.vec3, device=device),
            "d": wp.zeros(N, dtype=wp.float32, device=device)}


def loop_state(device="cpu", iterations: int = 4) -> tuple:
    """``(arrays, counter, flag, launch)``: :func:`unequal_arrays`, a WHILE counter of ``iterations``, an IF
    flag, and ``launch(kernel, *args)`` of :data:`N` threads, for steps with a WHILE of IFs."""
    a = unequal_arrays(device)
    counter = wp.array([iterations], dtype=wp.int32, device=device)
    flag = wp.zeros(1, dtype=wp.int32, device=device)

    def launch(k, *args):
        wp.launch(k, dim=N, inputs=list(args), device=device)

    return a, counter, flag, launch


def unequal_launches(a: dict) -> list:
    """``(kernel, inputs)`` of the step, in order: light, heavy, vec (medium), light."""
    return [(k_light, [a["x"], a["y"]]), (k_heavy, [a["y"], a["z"], HEAVY]), (k_vec, [a["pts"], a["d"], MEDIUM]),
            (k_light, [a["z"], a["y"]])]


def capture_unequal(path: Path, device="cpu") -> Path:
    """Four launches of very unequal cost: k_light, k_heavy (4000 steps per thread), k_vec (800), k_light."""
    a = unequal_arrays(device)
    for k, args in unequal_launches(a):  # compile outside the capture
        wp.launch(k, dim=N, inputs=args, device=device)
    with wrpkit.capture(device=device) as rec:
        for k, args in unequal_launches(a):
            wp.launch(k, dim=N, inputs=args, device=device)
    return rec.save(path, inputs={"x": a["x"], "pts": a["pts"]}, outputs={"y": a["y"], "z": a["z"], "d": a["d"]})


def capture_while_if(path: Path, device="cpu", iterations: int = 4) -> Path:
    """Op 0 k_light; op 1 a WHILE over ``counter`` whose body is k_count_down then an IF on ``flag``:
    then k_heavy (odd counters), else k_light; op 2 k_light.

    With ``counter`` = 4 the loop runs 4 times: counters 3, 2, 1, 0 after the count-down, so the IF takes
    then, else, then, else.
    """
    a = unequal_arrays(device)
    counter = wp.array([iterations], dtype=wp.int32, device=device)
    flag = wp.zeros(1, dtype=wp.int32, device=device)

    def heavy():
        wp.launch(k_heavy, dim=N, inputs=[a["y"], a["z"], HEAVY], device=device)

    def light():
        wp.launch(k_light, dim=N, inputs=[a["z"], a["y"]], device=device)

    def body():
        wp.launch(k_count_down, dim=1, inputs=[counter, flag], device=device)
        wp.capture_if(flag, on_true=heavy, on_false=light)

    with wrpkit.capture(device=device) as rec:
        wp.launch(k_light, dim=N, inputs=[a["x"], a["y"]], device=device)
        wp.capture_while(counter, body)
        wp.launch(k_light, dim=N, inputs=[a["y"], a["d"]], device=device)
    return rec.save(path, inputs={"x": a["x"], "counter": counter}, outputs={"y": a["y"], "z": a["z"], "d": a["d"]})


def capture_many_small(path: Path, device="cpu") -> Path:
    """Many sub-microsecond launches in a WHILE with an IF: 6 iterations of k_count_down then 300 k_move of
    64 ``vec3`` points (through a ``@wp.func``), and an IF (on odd counters: 3 of the 6) of 40 k_move on
    an unbound scratch array: 1,926 op runs, all in runs of consecutive ops."""
    pts = wp.array(np.zeros((64, 3), np.float32), dtype=wp.vec3, device=device)
    scratch = wp.zeros(64, dtype=wp.vec3, device=device)
    counter = wp.array([6], dtype=wp.int32, device=device)
    flag = wp.zeros(1, dtype=wp.int32, device=device)

    def then():
        for _ in range(40):
            wp.launch(k_move, dim=64, inputs=[scratch, 0.5], device=device)

    def body():
        wp.launch(k_count_down, dim=1, inputs=[counter, flag], device=device)
        for _ in range(300):
            wp.launch(k_move, dim=64, inputs=[pts, 0.999], device=device)
        wp.capture_if(flag, on_true=then)

    with wrpkit.capture(device=device) as rec:
        wp.capture_while(counter, body)
    return rec.save(path, inputs={"counter": counter}, outputs={"pts": pts})


def live_alone_ms(device="cpu", repeat: int = 15) -> dict:
    """``{kernel key: median ms}`` of each launch of the unequal step, launched alone, live (not captured)."""
    import statistics  # noqa: PLC0415
    import time  # noqa: PLC0415

    a = unequal_arrays(device)
    out: dict = {}
    for k, args in unequal_launches(a):
        times = []
        for _ in range(repeat):
            wp.synchronize_device(device)
            t0 = time.perf_counter()
            wp.launch(k, dim=N, inputs=args, device=device)
            wp.synchronize_device(device)
            times.append((time.perf_counter() - t0) * 1e3)
        out.setdefault(k.key, []).append(statistics.median(times))
    return {key: sum(v) for key, v in out.items()}
