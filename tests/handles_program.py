"""A step that queries a ``wp.Mesh`` built before the capture, for ``tests/replay/test_handles.py``.

    python handles_program.py ANNOTATION HOW OUT [refit]

ANNOTATION: ``handle`` (the kernel declares ``mesh: wp.handle``, which Warp relocates) or
``uint64`` (the raw id, a live pointer in any other process).  HOW: ``stock``
(``wp.capture_save``), ``wrpkit`` (``wrpkit.capture``) or ``eager`` (no capture: the step run
once, its output saved as OUT.npz, the truth a replay must give).  ``refit``: the step moves the
mesh's points and calls ``Mesh.refit()`` inside the captured step.
"""

import sys

import numpy as np
import warp as wp

ANNOTATION, HOW, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
REFIT = sys.argv[4:5] == ["refit"]
wp.config.quiet = True
MeshArg = wp.handle if ANNOTATION == "handle" else wp.uint64


@wp.kernel
def closest(mesh: MeshArg, pts: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point(mesh, pts[i], 10.0)
    if q.result:
        out[i] = q.u + 2.0 * q.v + float(q.face)


@wp.kernel
def lift(points: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    points[i] = points[i] + wp.vec3(0.0, 0.0, 0.25)


dev = "cpu"
rng = np.random.default_rng(3)
pts = wp.array(rng.random((32, 3), dtype=np.float32), dtype=wp.vec3, device=dev)
out = wp.zeros(32, dtype=float, device=dev)
verts = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0.5]], dtype=np.float32), dtype=wp.vec3,
                 device=dev)
faces = wp.array(np.array([0, 1, 2, 1, 3, 2], dtype=np.int32), device=dev)
mesh = wp.Mesh(points=verts, indices=faces)
wp.load_module(device=dev)


def step():
    if REFIT:
        wp.launch(lift, dim=4, inputs=[verts], device=dev)
        mesh.refit()
    wp.launch(closest, dim=32, inputs=[mesh.id, pts, out], device=dev)


if HOW == "eager":
    step()
    np.savez(OUT, out=out.numpy())
elif HOW == "stock":
    wp.capture_begin(device=dev, apic=True)
    step()
    graph = wp.capture_end()
    wp.capture_save(graph, OUT, inputs={"pts": pts}, outputs={"out": out})
else:
    import wrpkit
    from wrpkit.errors import WrpError

    with wrpkit.capture(device=dev) as rec:
        step()
    try:
        rec.save(OUT, inputs={"pts": pts}, outputs={"out": out})
    except WrpError as e:
        print(f"REFUSED {e}\nHINT {e.hint}")
        sys.exit(3)
