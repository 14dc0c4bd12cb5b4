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

import argparse
import pathlib

import numpy as np

import warp as wp

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
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bindings = list(dict.fromkeys(INPUTS + OUTPUTS))

    live = make_arrays()
    step(live)
    expected = {name: live[name].numpy() for name in bindings}

    arrays = make_arrays()
    np.savez(out_dir / f"{NAME}_inputs.npz", **{name: arrays[name].numpy() for name in INPUTS})
    wp.capture_begin(device="cpu", apic=True)
    try:
        step(arrays)
    finally:
        graph = wp.capture_end(device="cpu")
    wp.capture_save(
        graph,
        str(out_dir / NAME),
        inputs={name: arrays[name] for name in INPUTS},
        outputs={name: arrays[name] for name in OUTPUTS},
    )
    np.savez(out_dir / f"{NAME}_expected.npz", **expected)
    return out_dir / f"{NAME}.wrp"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="out", help="output directory (default: out)")
    args = parser.parse_args()
    wp.config.log_level = wp.LOG_WARNING
    wp.init()
    print(capture(args.out_dir))


if __name__ == "__main__":
    main()
