"""Capture ``y = a * x + y`` (SAXPY) on the CPU with stock Warp.

Writes, under OUT_DIR:

* ``saxpy.wrp`` and ``saxpy_modules/``: one KERNEL_LAUNCH of ``saxpy`` over
  1024 float32 elements, with the scalar ``a = 2.5`` baked into the launch;
* ``saxpy_inputs.npz``: the input bindings ``x`` and ``y`` before the step;
* ``saxpy_expected.npz``: every binding (``x``, ``y``) after one live step.

``y`` is updated in place, so it is bound both as an input and an output.

Usage: ``python samples/saxpy.py [OUT_DIR]`` (default ``out``).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

import warp as wp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _sample import main, write_sample  # noqa: E402  (shared capture-and-save steps)

NAME = "saxpy"
N = 1024
A = 2.5
INPUTS = ["x", "y"]
OUTPUTS = ["y"]


@wp.kernel
def saxpy(a: wp.float32, x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = a * x[i] + y[i]


def make_arrays(device: str = "cpu") -> dict[str, wp.array]:
    """Fresh, deterministic ``x`` and ``y``."""
    rng = np.random.default_rng(0)
    return {
        "x": wp.array(rng.standard_normal(N).astype(np.float32), dtype=wp.float32, device=device),
        "y": wp.array(rng.standard_normal(N).astype(np.float32), dtype=wp.float32, device=device),
    }


def step(arrays: dict[str, wp.array]) -> None:
    """Issue the captured work: one SAXPY launch."""
    wp.launch(saxpy, dim=N, inputs=[A, arrays["x"], arrays["y"]], device=arrays["x"].device)


def capture(out_dir: str | pathlib.Path) -> pathlib.Path:
    """Write the capture, its inputs and its expected bindings; return the ``.wrp`` path."""
    return write_sample(NAME, make_arrays, step, INPUTS, OUTPUTS, out_dir)


if __name__ == "__main__":
    main(capture, __doc__)
