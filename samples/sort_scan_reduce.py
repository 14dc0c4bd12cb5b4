"""Capture a sort / scan / reduce pipeline on the CPU with stock Warp.

For 200 particles with an integer cell id and a float weight:

1. ``iota`` (kernel) writes ``order[i] = i``;
2. ``wp.utils.radix_sort_pairs(cell_ids, order, N)`` sorts the ids and carries
   the particle indices along (RADIX_SORT; both buffers hold 2*N for scratch);
3. ``gather`` (kernel) reorders the weights by the sorted indices;
4. ``wp.utils.array_scan(sorted_weights, prefix, inclusive=True)`` (SCAN);
5. ``wp.utils.array_sum(sorted_weights, out=total)`` (REDUCTION).

Writes ``sort_scan_reduce.wrp`` (+ ``sort_scan_reduce_modules/``),
``sort_scan_reduce_inputs.npz`` (``cell_ids``, ``weights``) and
``sort_scan_reduce_expected.npz`` (every binding after one live step).
Usage: ``python samples/sort_scan_reduce.py [OUT_DIR]`` (default ``out``).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

import warp as wp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _sample import main, write_sample  # noqa: E402  (shared capture-and-save steps)

NAME = "sort_scan_reduce"
N = 200
INPUTS = ["cell_ids", "weights"]
OUTPUTS = ["cell_ids", "order", "sorted_weights", "prefix", "total"]


@wp.kernel
def iota(order: wp.array(dtype=wp.int32)):
    i = wp.tid()
    order[i] = i


@wp.kernel
def gather(order: wp.array(dtype=wp.int32), src: wp.array(dtype=float), dst: wp.array(dtype=float)):
    i = wp.tid()
    dst[i] = src[order[i]]


def make_arrays(device: str = "cpu") -> dict[str, wp.array]:
    """Random cell ids (in the first N of 2N slots) and weights."""
    rng = np.random.default_rng(0)
    ids = np.zeros(2 * N, dtype=np.int32)
    ids[:N] = rng.integers(0, 32, size=N, dtype=np.int32)
    return {
        "cell_ids": wp.array(ids, dtype=wp.int32, device=device),
        "order": wp.zeros(2 * N, dtype=wp.int32, device=device),
        "weights": wp.array(rng.uniform(0.0, 1.0, size=N).astype(np.float32), dtype=float, device=device),
        "sorted_weights": wp.zeros(N, dtype=float, device=device),
        "prefix": wp.zeros(N, dtype=float, device=device),
        "total": wp.zeros(1, dtype=float, device=device),
    }


def step(a: dict[str, wp.array]) -> None:
    """iota -> radix sort -> gather -> inclusive scan -> sum."""
    device = a["weights"].device
    wp.launch(iota, N, [a["order"]], device=device)
    wp.utils.radix_sort_pairs(a["cell_ids"], a["order"], N)
    wp.launch(gather, N, [a["order"], a["weights"], a["sorted_weights"]], device=device)
    wp.utils.array_scan(a["sorted_weights"], a["prefix"], inclusive=True)
    wp.utils.array_sum(a["sorted_weights"], out=a["total"])


def capture(out_dir: str | pathlib.Path) -> pathlib.Path:
    """Write the capture, its inputs and its expected bindings; return the ``.wrp`` path."""
    return write_sample(NAME, make_arrays, step, INPUTS, OUTPUTS, out_dir)


if __name__ == "__main__":
    main(capture, __doc__)
