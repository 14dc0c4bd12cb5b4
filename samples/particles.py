"""Capture a multi-kernel particle step (4 substeps) on the CPU with stock Warp.

Each substep launches three kernels over 256 particles:

1. ``integrate``: semi-implicit Euler under gravity plus a constant wind;
2. ``collide_ground``: push particles above the ground plane ``y = 0`` and
   reflect their normal velocity with restitution and Coulomb-like friction;
3. ``damp``: scale velocities by a damping factor.

A final ``kinetic_energy`` launch accumulates the total kinetic energy into a
one-element array (``energy`` is zeroed first, a MEMSET). The graph therefore
holds 13 KERNEL_LAUNCH ops and 1 MEMSET.

Writes ``particles.wrp`` (+ ``particles_modules/``), ``particles_inputs.npz``
(``positions``, ``velocities``, ``masses``) and ``particles_expected.npz``
(every binding after one live step). Usage:
``python samples/particles.py [OUT_DIR]`` (default ``out``).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

import warp as wp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _sample import main, write_sample  # noqa: E402  (shared capture-and-save steps)

NAME = "particles"
N = 256
SUBSTEPS = 4
DT = 1.0 / 240.0
INPUTS = ["positions", "velocities", "masses"]
OUTPUTS = ["positions", "velocities", "energy"]


@wp.kernel
def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), gravity: wp.vec3, wind: wp.vec3, dt: float):
    i = wp.tid()
    v[i] = v[i] + (gravity + wind) * dt
    x[i] = x[i] + v[i] * dt


@wp.kernel
def collide_ground(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), restitution: float, friction: float):
    i = wp.tid()
    p = x[i]
    if p[1] < 0.0:
        u = v[i]
        x[i] = wp.vec3(p[0], 0.0, p[2])
        tangential = wp.vec3(u[0], 0.0, u[2]) * wp.max(1.0 - friction, 0.0)
        v[i] = tangential + wp.vec3(0.0, -u[1] * restitution, 0.0)


@wp.kernel
def damp(v: wp.array(dtype=wp.vec3), factor: float):
    i = wp.tid()
    v[i] = v[i] * factor


@wp.kernel
def kinetic_energy(v: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), energy: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(energy, 0, 0.5 * m[i] * wp.dot(v[i], v[i]))


def make_arrays(device: str = "cpu") -> dict[str, wp.array]:
    """Particles in a box just above the ground, with random velocities and masses."""
    rng = np.random.default_rng(0)
    pos = rng.uniform([-1.0, 0.0, -1.0], [1.0, 0.05, 1.0], size=(N, 3)).astype(np.float32)
    vel = rng.normal(0.0, 1.0, size=(N, 3)).astype(np.float32)
    return {
        "positions": wp.array(pos, dtype=wp.vec3, device=device),
        "velocities": wp.array(vel, dtype=wp.vec3, device=device),
        "masses": wp.array(rng.uniform(0.5, 2.0, size=N).astype(np.float32), dtype=float, device=device),
        "energy": wp.zeros(1, dtype=float, device=device),
    }


def step(a: dict[str, wp.array]) -> None:
    """One frame: SUBSTEPS x (integrate, collide, damp), then the kinetic energy."""
    device = a["positions"].device
    x, v = a["positions"], a["velocities"]
    gravity, wind = wp.vec3(0.0, -9.81, 0.0), wp.vec3(0.5, 0.0, 0.0)
    for _ in range(SUBSTEPS):
        wp.launch(integrate, N, [x, v, gravity, wind, DT], device=device)
        wp.launch(collide_ground, N, [x, v, 0.5, 0.1], device=device)
        wp.launch(damp, N, [v, 0.999], device=device)
    a["energy"].zero_()
    wp.launch(kinetic_energy, N, [v, a["masses"], a["energy"]], device=device)


def capture(out_dir: str | pathlib.Path) -> pathlib.Path:
    """Write the capture, its inputs and its expected bindings; return the ``.wrp`` path."""
    return write_sample(NAME, make_arrays, step, INPUTS, OUTPUTS, out_dir)


if __name__ == "__main__":
    main(capture, __doc__)
