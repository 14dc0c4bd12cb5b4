"""Two programs in idioms wrpkit's other tests do not use, each run eagerly or captured.

    python idiom_programs.py NAME eager OUT.npz        # the step run without a capture (and OUT.npz.launches)
    python idiom_programs.py NAME stock OUT.wrp        # captured with wp.capture_begin / wp.capture_save
    python idiom_programs.py NAME wrpkit OUT.wrp       # captured with wrpkit.capture / wrpkit.save

``particles``: ``wp.array[...]`` annotations, a struct of arrays, an overloaded ``wp.func``, a 2-D
array, and a ``wp.capture_if`` inside a ``wp.capture_while``.
``descent``: ``wp.Tape`` forward and backward inside a ``wp.capture_while`` body, 3-D and vector
arrays, an atomic reduction, and the step's own gradient update.

The inputs are rebuilt identically in every mode; OUT.npz / the capture's outputs hold the arrays
the step leaves behind, so an eager run is the truth a replay is compared with.
"""

import sys

import numpy as np
import warp as wp

wp.config.quiet = True

N = 16
ITERATIONS = 3


@wp.struct
class Particles:
    pos: wp.array[wp.vec3]
    vel: wp.array[wp.vec3]


@wp.func
def damp(v: wp.vec3, k: float):
    return v * k


@wp.func
def damp(v: float, k: float):  # noqa: F811  (a wp.func overload: Warp picks it by argument type)
    return v * k


@wp.kernel
def integrate(p: Particles, dt: float, speed: wp.array[float]):
    i = wp.tid()
    v = damp(p.vel[i], 0.9)
    p.vel[i] = v
    p.pos[i] = p.pos[i] + v * dt
    speed[i] = damp(wp.length(v), 2.0)


@wp.kernel
def cool(grid: wp.array2d[float], hot: wp.array[wp.int32]):
    i, j = wp.tid()
    grid[i, j] = grid[i, j] * 0.5
    if i == 0 and j == 0:
        hot[0] = wp.where(grid[0, 0] > 1.0, 1, 0)


@wp.kernel
def count_down(counter: wp.array[wp.int32]):
    counter[0] = counter[0] - 1


@wp.kernel
def energy(x: wp.array3d[float], v: wp.array[wp.vec2], loss: wp.array[float]):
    i, j, k = wp.tid()
    e = x[i, j, k] * x[i, j, k] + wp.dot(v[k], v[k]) * x[i, j, k]
    wp.atomic_add(loss, 0, e)


@wp.kernel
def descend(x: wp.array3d[float], g: wp.array3d[float], rate: float):
    i, j, k = wp.tid()
    x[i, j, k] = x[i, j, k] - rate * g[i, j, k]


def particles_arrays():
    rng = np.random.default_rng(7)
    p = Particles()
    p.pos = wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device="cpu")
    p.vel = wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device="cpu")
    return {"p": p, "speed": wp.zeros(N, dtype=float, device="cpu"),
            "grid": wp.array(rng.uniform(0, 40, (4, 5)).astype(np.float32), device="cpu"),
            "hot": wp.array([1], dtype=wp.int32, device="cpu"),
            "counter": wp.array([ITERATIONS], dtype=wp.int32, device="cpu")}


def particles_step(a, captured: bool, launched: list):
    def hot_branch():
        wp.launch(integrate, dim=N, inputs=[a["p"], 0.1, a["speed"]], device="cpu")
        launched.append("integrate")

    def body():
        wp.launch(cool, dim=(4, 5), inputs=[a["grid"], a["hot"]], device="cpu")
        launched.append("cool")
        if captured:
            wp.capture_if(a["hot"], on_true=hot_branch)
        elif a["hot"].numpy()[0]:
            hot_branch()
        wp.launch(count_down, dim=1, inputs=[a["counter"]], device="cpu")
        launched.append("count_down")

    if captured:
        wp.capture_while(a["counter"], while_body=body)
    else:
        while a["counter"].numpy()[0]:
            body()


def particles_outputs(a):
    return {"pos": a["p"].pos, "vel": a["p"].vel, "speed": a["speed"], "grid": a["grid"], "hot": a["hot"],
            "counter": a["counter"]}


def particles_inputs(a):
    return {"grid": a["grid"], "counter": a["counter"]}


def descent_arrays():
    rng = np.random.default_rng(11)
    x = wp.array(rng.standard_normal((2, 3, 4)).astype(np.float32), device="cpu", requires_grad=True)
    v = wp.array(rng.standard_normal((4, 2)).astype(np.float32), dtype=wp.vec2, device="cpu", requires_grad=True)
    return {"x": x, "v": v, "loss": wp.zeros(1, dtype=float, device="cpu", requires_grad=True),
            "counter": wp.array([ITERATIONS], dtype=wp.int32, device="cpu")}


def descent_step(a, captured: bool, launched: list):
    def body():
        tape = wp.Tape()  # one per iteration: an eager loop's tape must not replay earlier iterations
        a["loss"].zero_()
        with tape:
            wp.launch(energy, dim=(2, 3, 4), inputs=[a["x"], a["v"], a["loss"]], device="cpu")
        tape.backward(loss=a["loss"])
        wp.launch(descend, dim=(2, 3, 4), inputs=[a["x"], a["x"].grad, 0.05], device="cpu")
        tape.zero()
        wp.launch(count_down, dim=1, inputs=[a["counter"]], device="cpu")
        launched.extend(["energy", "energy (backward)", "descend", "count_down"])

    if captured:
        wp.capture_while(a["counter"], while_body=body)
    else:
        while a["counter"].numpy()[0]:
            body()


def descent_outputs(a):
    return {"x": a["x"], "v_grad": a["v"].grad, "loss": a["loss"], "counter": a["counter"]}


def descent_inputs(a):
    return {"x": a["x"], "counter": a["counter"]}


PROGRAMS = {"particles": (particles_arrays, particles_step, particles_inputs, particles_outputs),
            "descent": (descent_arrays, descent_step, descent_inputs, descent_outputs)}


def main(name: str, mode: str, out: str) -> None:
    make, step, inputs, outputs = PROGRAMS[name]
    wp.init()
    a = make()
    wp.load_module(sys.modules[__name__], device="cpu")
    launched: list = []
    if mode == "eager":
        step(a, captured=False, launched=launched)
        np.savez(out, **{k: arr.numpy() for k, arr in outputs(a).items()})
        with open(out + ".launches", "w") as f:
            f.write("\n".join(launched))
        return
    if mode == "stock":
        wp.capture_begin(device="cpu", apic=True)
        try:
            step(a, captured=True, launched=launched)
        finally:
            graph = wp.capture_end()
        wp.capture_save(graph, out, inputs=inputs(a), outputs=outputs(a))
        return
    import wrpkit

    with wrpkit.capture(device="cpu") as rec:
        step(a, captured=True, launched=launched)
    wrpkit.save(rec, out, inputs=inputs(a), outputs=outputs(a))


if __name__ == "__main__":
    main(*sys.argv[1:4])
