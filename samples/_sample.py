"""What every sample does after defining its Warp program: capture it and write the files.

A sample defines ``make_arrays(device)``, ``step(arrays)`` and the binding
names; :func:`write_sample` captures ``step`` with stock Warp
(``wp.capture_begin(apic=True)`` ... ``wp.capture_save``) and writes

* ``OUT/<name>.wrp`` and ``OUT/<name>_modules/``,
* ``OUT/<name>_inputs.npz``: the input bindings' values,
* ``OUT/<name>_expected.npz``: every binding after one live run of ``step``.
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Callable

import numpy as np

import warp as wp


def write_sample(name: str, make_arrays: Callable, step: Callable, inputs: list, outputs: list,
                 out_dir) -> pathlib.Path:
    """Capture ``step`` on fresh arrays, save it, and write its inputs and expected outputs.

    Returns:
        The path of the ``.wrp``.
    """
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bindings = list(dict.fromkeys(inputs + outputs))

    live = make_arrays()
    step(live)
    expected = {n: live[n].numpy() for n in bindings}

    arrays = make_arrays()
    np.savez(out_dir / f"{name}_inputs.npz", **{n: arrays[n].numpy() for n in inputs})
    wp.capture_begin(device="cpu", apic=True)
    try:
        step(arrays)
    finally:
        graph = wp.capture_end(device="cpu")
    wp.capture_save(
        graph,
        str(out_dir / name),
        inputs={n: arrays[n] for n in inputs},
        outputs={n: arrays[n] for n in outputs},
    )
    np.savez(out_dir / f"{name}_expected.npz", **expected)
    return out_dir / f"{name}.wrp"


def main(capture: Callable, doc: str) -> None:
    """Command line of a sample: ``python samples/<name>.py [OUT_DIR]``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="out", help="output directory (default: out)")
    args = parser.parse_args()
    wp.config.log_level = wp.LOG_WARNING
    wp.init()
    print(capture(args.out_dir))
