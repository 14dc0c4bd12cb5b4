"""Capture a ``wp.capture_while`` Jacobi solve on the CPU with stock Warp.

Solves the tridiagonal system ``2.5*x[i] - x[i-1] - x[i+1] = b[i]`` (n = 64)
with Jacobi sweeps inside a ``wp.capture_while`` loop. The loop body:

1. ``jacobi_sweep`` writes the next iterate into ``x_next``;
2. ``wp.copy(x, x_next)`` copies it back (MEMCPY_D2D);
3. ``update_condition`` (one thread) computes the max residual, increments
   ``iterations`` and sets ``cond = residual > TOL and iterations < MAX_ITERS``.

The graph is one WHILE op whose body holds 3 ops; the iteration count is
decided at replay time by the data, not at capture time.

Writes ``while_loop.wrp`` (+ ``while_loop_modules/``),
``while_loop_inputs.npz`` (``b``, ``x``, ``cond``, ``iterations``) and
``while_loop_expected.npz`` (every binding after one live run).
Usage: ``python samples/while_loop.py [OUT_DIR]`` (default ``out``).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

import warp as wp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _sample import main, write_sample  # noqa: E402  (shared capture-and-save steps)

NAME = "while_loop"
N = 64
TOL = 1.0e-5
MAX_ITERS = 500
INPUTS = ["b", "x", "cond", "iterations"]
OUTPUTS = ["x", "cond", "iterations", "residual"]


@wp.kernel
def jacobi_sweep(b: wp.array(dtype=float), x: wp.array(dtype=float), x_next: wp.array(dtype=float)):
    i = wp.tid()
    n = x.shape[0]
    left = float(0.0)
    right = float(0.0)
    if i > 0:
        left = x[i - 1]
    if i < n - 1:
        right = x[i + 1]
    x_next[i] = (b[i] + left + right) / 2.5


@wp.kernel
def update_condition(
    b: wp.array(dtype=float),
    x: wp.array(dtype=float),
    tol: float,
    max_iters: int,
    residual: wp.array(dtype=float),
    iterations: wp.array(dtype=wp.int32),
    cond: wp.array(dtype=wp.int32),
):
    n = x.shape[0]
    r = float(0.0)
    for i in range(n):
        ax = 2.5 * x[i]
        if i > 0:
            ax = ax - x[i - 1]
        if i < n - 1:
            ax = ax - x[i + 1]
        r = wp.max(r, wp.abs(b[i] - ax))
    residual[0] = r
    iterations[0] = iterations[0] + 1
    cond[0] = wp.where(r > tol and iterations[0] < max_iters, 1, 0)


def make_arrays(device: str = "cpu") -> dict[str, wp.array]:
    """Random right-hand side, zero initial guess, loop condition armed."""
    rng = np.random.default_rng(0)
    return {
        "b": wp.array(rng.standard_normal(N).astype(np.float32), dtype=float, device=device),
        "x": wp.zeros(N, dtype=float, device=device),
        "x_next": wp.zeros(N, dtype=float, device=device),
        "cond": wp.ones(1, dtype=wp.int32, device=device),
        "iterations": wp.zeros(1, dtype=wp.int32, device=device),
        "residual": wp.zeros(1, dtype=float, device=device),
    }


def step(a: dict[str, wp.array]) -> None:
    """Iterate Jacobi sweeps while ``cond`` is nonzero."""
    device = a["x"].device

    def body():
        wp.launch(jacobi_sweep, N, [a["b"], a["x"], a["x_next"]], device=device)
        wp.copy(a["x"], a["x_next"])
        wp.launch(
            update_condition,
            1,
            [a["b"], a["x"], TOL, MAX_ITERS, a["residual"], a["iterations"], a["cond"]],
            device=device,
        )

    wp.capture_while(a["cond"], body)


def capture(out_dir: str | pathlib.Path) -> pathlib.Path:
    """Write the capture, its inputs and its expected bindings; return the ``.wrp`` path."""
    return write_sample(NAME, make_arrays, step, INPUTS, OUTPUTS, out_dir)


if __name__ == "__main__":
    main(capture, __doc__)
