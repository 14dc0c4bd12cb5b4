"""Programs in idioms Warp's own code uses, for ``tests/debug/test_diff_meaning.py``.

    python meaning_programs.py unique OUT [SCALE]   # two kernels sharing a key, each in a "unique" module
    python meaning_programs.py tape OUT             # wp.Tape: forward, loss, backward (stock capture)
"""

import sys

import numpy as np
import warp as wp

wp.config.quiet = True


def make_scale(s: float):
    @wp.kernel(module="unique")
    def apply(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        y[i] = x[i] * s

    return apply


@wp.kernel
def force(x: wp.array(dtype=float), f: wp.array(dtype=float)):
    i = wp.tid()
    f[i] = x[i] * x[i]


@wp.kernel
def loss_k(f: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, f[i])


def main(what: str, out: str, extra: list) -> None:
    dev = "cpu"
    n = 16
    if what == "unique":
        k2, k3 = make_scale(2.0), make_scale(float(extra[0]) if extra else 3.0)
        x = wp.array(np.arange(n, dtype=np.float32), device=dev)
        y = wp.zeros(n, dtype=float, device=dev)
        z = wp.zeros(n, dtype=float, device=dev)
        wp.launch(k2, dim=n, inputs=[x, y], device=dev)  # compiles both modules before the capture
        wp.launch(k3, dim=n, inputs=[y, z], device=dev)
        wp.capture_begin(device=dev, apic=True)
        wp.launch(k2, dim=n, inputs=[x, y], device=dev)
        wp.launch(k3, dim=n, inputs=[y, z], device=dev)
        graph = wp.capture_end()
        wp.capture_save(graph, out, inputs={"x": x}, outputs={"z": z})
    else:
        x = wp.array(np.arange(n, dtype=np.float32), requires_grad=True, device=dev)
        f = wp.zeros(n, dtype=float, requires_grad=True, device=dev)
        loss = wp.zeros(1, dtype=float, requires_grad=True, device=dev)
        wp.load_module(device=dev)
        wp.capture_begin(device=dev, apic=True)
        tape = wp.Tape()
        with tape:
            wp.launch(force, dim=n, inputs=[x, f], device=dev)
            wp.launch(loss_k, dim=n, inputs=[f, loss], device=dev)
        tape.backward(loss=loss)
        graph = wp.capture_end()
        wp.capture_save(graph, out, inputs={"x": x}, outputs={"loss": loss, "x_grad": x.grad, "f_grad": f.grad})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
