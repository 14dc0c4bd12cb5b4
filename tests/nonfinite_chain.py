"""Spring-chain programs with a planted non-finite value in an UNBOUND array.

Written for the debugging tools' tests as a user would write a program: the
kernels live in this script, a WHILE loop steps the chain, and the bad value
first appears in a scratch array that no binding names (so a tool that checks
only bound arrays blames the wrong kernel).  Three variants:

* ``if_in_while``: the faulty ``spring_forces`` runs in an IF body inside the
  WHILE; it divides by a spring length that reaches 0 at iteration ``BAD_IT``
  and writes Inf into the unbound ``force``; ``integrate`` then spreads it
  into the bound ``x``.
* ``func``: ``pressure`` calls a ``@wp.func`` whose ``sqrt`` turns negative at
  iteration ``BAD_IT``: NaN in the unbound ``pressure`` array.
* ``vec3``: as ``if_in_while`` (without the IF) on ``wp.vec3`` positions,
  with an unbound ``wp.vec3`` force array.

Run as a script, it captures with stock Warp only (``wp.capture_begin(apic=True)``
... ``wp.capture_save``), so its kernels are recorded under module
``__main__`` and the file carries no types::

    python nonfinite_chain.py VARIANT OUT.wrp

:func:`eager_first_nonfinite` runs the same kernels eagerly, one launch at a
time, checking every float array each launch is given: the independent
answer to "which kernel first wrote a non-finite value, at which iteration".
"""

from __future__ import annotations

import sys

import numpy as np
import warp as wp

#: Points in the chain, WHILE iterations, and the iteration the fault appears at.
N = 8
ITERATIONS = 10
BAD_IT = {"if_in_while": 6, "func": 4, "vec3": 3}
VARIANTS = tuple(BAD_IT)
DT = 0.01


@wp.kernel
def count_down(counter: wp.array(dtype=wp.int32), step: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] - 1
    step[0] = step[0] + 1


@wp.kernel
def spring_lengths(step: wp.array(dtype=wp.int32), bad_at: int, length: wp.array(dtype=wp.float32)):
    i = wp.tid()
    # One spring shortens with every step and reaches exactly 0 at step ``bad_at``.
    if i == 2:
        length[i] = 0.25 * float(bad_at - step[0] + 1)
    else:
        length[i] = 1.0


@wp.kernel
def spring_forces(x: wp.array(dtype=wp.float32), length: wp.array(dtype=wp.float32),
                  force: wp.array(dtype=wp.float32)):
    i = wp.tid()
    force[i] = (x[i + 1] - x[i] - 0.5) / length[i]


@wp.kernel
def integrate(x: wp.array(dtype=wp.float32), v: wp.array(dtype=wp.float32), force: wp.array(dtype=wp.float32),
              dt: float):
    i = wp.tid()
    v[i] = v[i] + force[i] * dt
    x[i] = x[i] + v[i] * dt


@wp.func
def pressure_of(density: float, step: int, bad_at: int):
    # The "safe" helper is not: its sqrt argument goes negative at step ``bad_at``.
    return density / wp.sqrt(float(bad_at - step) - 0.5)


@wp.kernel
def pressure(x: wp.array(dtype=wp.float32), step: wp.array(dtype=wp.int32), bad_at: int,
             p: wp.array(dtype=wp.float32)):
    i = wp.tid()
    p[i] = pressure_of(1.0 + x[i] * 0.0, step[0] - 1, bad_at)


@wp.kernel
def apply_pressure(p: wp.array(dtype=wp.float32), x: wp.array(dtype=wp.float32), dt: float):
    i = wp.tid()
    x[i] = x[i] + p[i] * dt


@wp.kernel
def spring_forces3(x: wp.array(dtype=wp.vec3), length: wp.array(dtype=wp.float32), force: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    d = x[i + 1] - x[i]
    force[i] = d / length[i]


@wp.kernel
def integrate3(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), force: wp.array(dtype=wp.vec3), dt: float):
    i = wp.tid()
    v[i] = v[i] + force[i] * dt
    x[i] = x[i] + v[i] * dt


def make_arrays(variant: str, device="cpu") -> dict:
    """Fresh arrays of one variant: bound ones (counter, step, flag, x, v) and unbound scratch."""
    vec = variant == "vec3"
    dtype = wp.vec3 if vec else wp.float32
    x0 = np.stack([np.arange(N, dtype=np.float32)] * 3, axis=1) if vec else np.arange(N, dtype=np.float32)
    return {
        "counter": wp.array([ITERATIONS], dtype=wp.int32, device=device),
        "step": wp.zeros(1, dtype=wp.int32, device=device),
        "flag": wp.array([1], dtype=wp.int32, device=device),
        "x": wp.array(x0, dtype=dtype, device=device),
        "v": wp.zeros(N, dtype=dtype, device=device),
        # Unbound scratch: no binding names these.
        "length": wp.zeros(N, dtype=wp.float32, device=device),
        "force": wp.zeros(N, dtype=dtype, device=device),
        "p": wp.zeros(N, dtype=wp.float32, device=device),
    }


def run_program(variant: str, a: dict, launch=None) -> None:
    """Launch the variant's ops (captured when a capture is active, else eagerly).

    ``launch(kernel, dim, inputs)``: what launches (default :func:`wp.launch`);
    the eager checker passes one that inspects the arrays after each launch.
    """
    dev = a["x"].device
    bad = BAD_IT[variant]
    if launch is None:
        def launch(k, dim, inputs):
            wp.launch(k, dim=dim, inputs=inputs, device=dev)

    def forces():
        launch(spring_forces, N - 1, [a["x"], a["length"], a["force"]])

    def body():
        launch(count_down, 1, [a["counter"], a["step"]])
        if variant == "if_in_while":
            launch(spring_lengths, N, [a["step"], bad, a["length"]])
            wp.capture_if(a["flag"], forces)
            launch(integrate, N - 1, [a["x"], a["v"], a["force"], DT])
        elif variant == "func":
            launch(pressure, N, [a["x"], a["step"], bad, a["p"]])
            launch(apply_pressure, N, [a["p"], a["x"], DT])
        else:
            launch(spring_lengths, N, [a["step"], bad, a["length"]])
            launch(spring_forces3, N - 1, [a["x"], a["length"], a["force"]])
            launch(integrate3, N - 1, [a["x"], a["v"], a["force"], DT])

    wp.capture_while(a["counter"], body)


def bindings(a: dict) -> tuple:
    """``(inputs, outputs)`` as both capture routes bind them."""
    return ({"counter": a["counter"], "step": a["step"], "flag": a["flag"], "x": a["x"]},
            {"x_out": a["x"], "v": a["v"]})


def eager_first_nonfinite(variant: str, device="cpu") -> dict:
    """Run the variant eagerly and find the first launch that leaves a NaN or Inf in an array it was given.

    Returns:
        ``{"seq", "kernel", "iteration", "argument", "nan", "inf", "before", "launches"}``: ``seq``
        counts launches from 0 as ``wrp trace`` numbers its steps; ``iteration`` is the WHILE
        iteration (0-based); ``argument`` the kernel argument's name; ``before`` ``{argument: digest}``
        of that launch's arrays just before it ran; ``launches`` every launch run.
    """
    a = make_arrays(variant, device)
    state = {"seq": 0, "first": None, "iteration": -1}

    def launch(k, dim, inputs):
        if k is count_down:
            state["iteration"] += 1
        before = {arg.label: _digest(value.numpy()) for arg, value in zip(k.adj.args, inputs)
                  if isinstance(value, wp.array)}
        wp.launch(k, dim=dim, inputs=inputs, device=device)
        wp.synchronize_device(device)
        if state["first"] is None:
            for arg, value in zip(k.adj.args, inputs):
                if isinstance(value, wp.array) and value.dtype in (wp.float32, wp.vec3):
                    vals = value.numpy()
                    if not np.isfinite(vals).all():
                        state["first"] = {"seq": state["seq"], "kernel": k.key, "iteration": state["iteration"],
                                          "argument": arg.label, "nan": int(np.isnan(vals).sum()),
                                          "inf": int(np.isinf(vals).sum()), "before": before}
                        break
        state["seq"] += 1

    run_program(variant, a, launch)
    return {**state["first"], "launches": state["seq"]}


def _digest(arr) -> str:
    """SHA-256 (first 32 hex digits) of an array's bytes, as ``wrp trace`` digests regions."""
    import hashlib  # noqa: PLC0415

    return hashlib.sha256(np.ascontiguousarray(arr).view(np.uint8).data).hexdigest()[:32]


def stock_capture(variant: str, path: str, device="cpu") -> None:
    """Capture with stock Warp only and save with ``wp.capture_save`` (no wrpkit, no types)."""
    a = make_arrays(variant, device)
    wp.capture_begin(device=device, apic=True)
    try:
        run_program(variant, a)
    finally:
        graph = wp.capture_end(device=device)
    inputs, outputs = bindings(a)
    wp.capture_save(graph, path, inputs=inputs, outputs=outputs)


if __name__ == "__main__":
    wp.config.quiet = True
    stock_capture(sys.argv[1], sys.argv[2])
