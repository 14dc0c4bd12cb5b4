"""Programs for the debugging tools' tests: real Warp captures with known faults.

Each ``capture_*`` function captures with stock Warp (through ``wrpkit.capture``)
and saves to the path given; the docstrings say where the fault is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import warp as wp

import wrpkit


@wp.kernel
def k_affine(src: wp.array(dtype=wp.float32), dst: wp.array(dtype=wp.float32), a: wp.float32, b: wp.float32):
    i = wp.tid()
    dst[i] = src[i] * a + b


@wp.kernel
def k_sqrt(src: wp.array(dtype=wp.float32), dst: wp.array(dtype=wp.float32)):
    i = wp.tid()
    dst[i] = wp.sqrt(src[i])


@wp.kernel
def k_decrement(counter: wp.array(dtype=wp.int32), v: wp.array(dtype=wp.float32)):
    i = wp.tid()
    v[i] = v[i] - 1.0
    if i == 0:
        counter[0] = counter[0] - 1


N = 16


def nan_chain_arrays(device="cpu") -> dict:
    return {"x": wp.array(np.arange(N, dtype=np.float32), device=device),
            "y": wp.zeros(N, dtype=wp.float32, device=device),
            "z": wp.zeros(N, dtype=wp.float32, device=device),
            "w": wp.zeros(N, dtype=wp.float32, device=device)}


def nan_chain_step(a: dict, n_ops: int = 4, scale: float = 1.0, dim: int = N) -> None:
    """Op 2 (k_sqrt of 3 - x) writes NaN into ``w`` from element 4 on."""
    dev = a["x"].device
    launches = [(k_affine, [a["x"], a["y"], scale, 0.0]), (k_affine, [a["y"], a["z"], -1.0, 3.0]),
                (k_sqrt, [a["z"], a["w"]]), (k_affine, [a["w"], a["y"], 1.0, 0.0])]
    for k, args in launches[:n_ops]:
        wp.launch(k, dim=dim, inputs=args, device=dev)


def capture_nan_chain(path: Path, device="cpu", scale: float = 1.0, dim: int = N) -> Path:
    a = nan_chain_arrays(device)
    with wrpkit.capture(device=device) as rec:
        nan_chain_step(a, scale=scale, dim=dim)
    return rec.save(path, inputs={"x": a["x"]}, outputs={"y": a["y"], "z": a["z"], "w": a["w"]})


def while_arrays(device="cpu") -> dict:
    return {"counter": wp.array([5], dtype=wp.int32, device=device),
            "v": wp.array(np.full(4, 2.5, np.float32), device=device),
            "out": wp.zeros(4, dtype=wp.float32, device=device),
            "x": wp.array(np.ones(4, np.float32), device=device)}


def capture_while_nan(path: Path, device="cpu") -> Path:
    """Op 0 is a launch; op 1 a WHILE whose body is [k_decrement, k_sqrt(v -> out)].

    ``v`` starts at 2.5 and loses 1 per iteration, so ``out`` first gets NaN
    at iteration 2, path ``1.1``.
    """
    a = while_arrays(device)

    def body():
        wp.launch(k_decrement, dim=4, inputs=[a["counter"], a["v"]], device=device)
        wp.launch(k_sqrt, dim=4, inputs=[a["v"], a["out"]], device=device)

    with wrpkit.capture(device=device) as rec:
        wp.launch(k_affine, dim=4, inputs=[a["x"], a["x"], 2.0, 0.0], device=device)
        wp.capture_while(a["counter"], body)
    return rec.save(path, inputs={"counter": a["counter"], "v": a["v"], "x": a["x"]},
                    outputs={"out": a["out"]})


@wp.kernel
def k_keep_going(flag: wp.array(dtype=wp.int32), inner: wp.array(dtype=wp.int32), n: wp.int32):
    # The outer loop's condition is left as it came in: 0 ends the loop at once, 1 never.
    flag[0] = flag[0] * 1
    inner[0] = n


@wp.kernel
def k_count_down(inner: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = out[i] + 1.0
    if i == 0:
        inner[0] = inner[0] - 1


def capture_endless_while(path: Path, device="cpu", inner: int = 65535) -> Path:
    """``WHILE flag { k_keep_going; WHILE inner { k_count_down } }``, captured with ``flag`` = 0.

    With the input ``flag`` = 1 the replay never ends in practice: the outer body
    leaves ``flag`` at 1 and the inner loop ends after ``inner`` iterations, so
    neither loop reaches Warp's 2^24-iteration guard on its own (one that did
    would end the replay with an error within seconds) and together they run
    about 2^24 x 65535 launches.  Only a timeout stops it.
    """
    flag = wp.array([0], dtype=wp.int32, device=device)
    count = wp.zeros(1, dtype=wp.int32, device=device)
    out = wp.zeros(4, dtype=wp.float32, device=device)

    def inner_body():
        wp.launch(k_count_down, dim=4, inputs=[count, out], device=device)

    def outer_body():
        wp.launch(k_keep_going, dim=1, inputs=[flag, count, inner], device=device)
        wp.capture_while(count, inner_body)

    with wrpkit.capture(device=device) as rec:
        wp.capture_while(flag, outer_body)
    return rec.save(path, inputs={"flag": flag}, outputs={"out": out})


# ---------------------------------------------------------------------------
# Spring chains with a planted non-finite value in an unbound array
# (tests/nonfinite_chain.py): a wrpkit capture, and a stock one made by
# running that file as a script (kernels under module ``__main__``, no types).
# ---------------------------------------------------------------------------

import subprocess  # noqa: E402
import sys  # noqa: E402

import nonfinite_chain as chain  # noqa: E402

#: The script whose kernels a stock capture records under ``__main__``.
CHAIN_SCRIPT = Path(chain.__file__)


def capture_chain(variant: str, path: Path, device="cpu") -> Path:
    """A wrpkit capture of one chain variant (typed bindings, kernel signatures)."""
    a = chain.make_arrays(variant, device)
    with wrpkit.capture(device=device) as rec:
        chain.run_program(variant, a)
    inputs, outputs = chain.bindings(a)
    return rec.save(path, inputs=inputs, outputs=outputs)


def stock_capture_chain(variant: str, path: Path) -> Path:
    """Run ``nonfinite_chain.py`` as a script: stock Warp captures and saves, no wrpkit involved."""
    subprocess.run([sys.executable, str(CHAIN_SCRIPT), variant, str(path)], check=True, timeout=300,
                   capture_output=True)
    return Path(path)
