"""A particle step a user might write, captured with stock Warp only, for ``wrp profile --kernels``.

Run as a script, it captures with ``wp.capture_begin(apic=True)`` ...
``wp.capture_save`` (no wrpkit, so the file carries no types and the kernels
are recorded under module ``__main__``)::

    python tests/profile_stock_program.py OUT.wrp

The step: ``integrate`` moves ``vec3`` positions through a ``@wp.func``
helper into an unbound scratch array, then a WHILE over ``steps`` counts down
and, inside it, an IF on ``odd`` either relaxes the positions (the costly
kernel, ``RELAX`` inner steps per thread) or only damps them.
Bindings: inputs ``pos`` (vec3), ``vel`` (vec3), ``steps`` (int32); output ``energy`` (float32).
"""

from __future__ import annotations

import sys

import numpy as np
import warp as wp

N = 2048
RELAX = 400
STEPS = 3


@wp.func
def clamp_len(v: wp.vec3, top: float) -> wp.vec3:
    n = wp.length(v)
    if n > top:
        return v * (top / n)
    return v


@wp.kernel
def integrate(pos: wp.array(dtype=wp.vec3), vel: wp.array(dtype=wp.vec3), scratch: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    scratch[i] = pos[i] + clamp_len(vel[i], 1.0) * 0.01


@wp.kernel
def count_down(steps: wp.array(dtype=wp.int32), odd: wp.array(dtype=wp.int32)):
    steps[0] = steps[0] - 1
    odd[0] = steps[0] % 2


@wp.kernel
def relax(scratch: wp.array(dtype=wp.vec3), energy: wp.array(dtype=wp.float32), inner: wp.int32):
    i = wp.tid()
    p = scratch[i]
    e = float(0.0)
    for _ in range(inner):
        p = p * 0.999 + wp.vec3(0.001, 0.0, 0.0)
        e = e + wp.length_sq(p)
    scratch[i] = p
    energy[i] = e


@wp.kernel
def damp(scratch: wp.array(dtype=wp.vec3), energy: wp.array(dtype=wp.float32)):
    i = wp.tid()
    scratch[i] = scratch[i] * 0.5
    energy[i] = energy[i] * 0.5


def make_arrays(device="cpu") -> dict:
    rng = np.random.default_rng(7)
    return {"pos": wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device=device),
            "vel": wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device=device),
            "scratch": wp.zeros(N, dtype=wp.vec3, device=device),
            "steps": wp.array([STEPS], dtype=wp.int32, device=device),
            "odd": wp.zeros(1, dtype=wp.int32, device=device),
            "energy": wp.zeros(N, dtype=wp.float32, device=device)}


def run_step(a: dict, device="cpu") -> None:
    """The step, as launched live or inside a capture."""
    def costly():
        wp.launch(relax, dim=N, inputs=[a["scratch"], a["energy"], RELAX], device=device)

    def cheap():
        wp.launch(damp, dim=N, inputs=[a["scratch"], a["energy"]], device=device)

    def body():
        wp.launch(count_down, dim=1, inputs=[a["steps"], a["odd"]], device=device)
        wp.capture_if(a["odd"], on_true=costly, on_false=cheap)

    wp.launch(integrate, dim=N, inputs=[a["pos"], a["vel"], a["scratch"]], device=device)
    wp.capture_while(a["steps"], body)


def stock_capture(path: str, device="cpu") -> None:
    """Capture the step with stock Warp only and save it with ``wp.capture_save``."""
    a = make_arrays(device)
    wp.capture_begin(device=device, apic=True)
    try:
        run_step(a, device)
    finally:
        graph = wp.capture_end(device=device)
    wp.capture_save(graph, path, inputs={"pos": a["pos"], "vel": a["vel"], "steps": a["steps"]},
                    outputs={"energy": a["energy"]})


if __name__ == "__main__":
    wp.config.quiet = True
    stock_capture(sys.argv[1])
