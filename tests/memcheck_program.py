"""A step with an out-of-bounds access planted where asked, for ``tests/debug/test_memcheck.py``.

    python memcheck_program.py CASE BUG HOW OUT

CASE: ``launch`` (a launch of 128 threads into a 64-element array), ``rows``
(an off-by-one in a loop over a ``wp.array2d``'s columns), ``indexed`` (a
write through a ``wp.indexedarray`` whose index array holds one index too
many), ``under`` (``a[i - 65]`` of a 64-element array at ``i = 0``: a read
before its start, as Warp wraps only indices down to ``-n``), ``nested`` (the bad
launch inside an IF inside a WHILE, in its third iteration).
BUG: 1 plants the bug, 0 runs the same step without it.
HOW: ``stock`` (``wp.capture_save``), ``wrpkit`` (``wrpkit.capture``), or
``eager-debug``: run the step without capturing, with Warp's debug mode
(its bounds checks), printing ``LAUNCH <n> <kernel>`` before each launch, so
that the last such line before Warp's assertion names the launch that went
out of bounds, as Warp itself sees it.
"""

import sys

import numpy as np
import warp as wp

CASE, BUG, HOW, OUT = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
if HOW == "eager-debug":
    wp.config.mode = "debug"
wp.config.quiet = True
wp.init()
N = 64
M, C = 4, 8


from memcheck_kernels import count_down, fill_rows, lookback, scale, scatter, shift  # noqa: E402

dev = "cpu"
x = wp.array(np.arange(128, dtype=np.float32), device=dev)
y = wp.zeros(N, dtype=wp.float32, device=dev)
z = wp.zeros(N, dtype=wp.float32, device=dev)
a2 = wp.zeros((M, C), dtype=wp.float32, device=dev)
base = wp.zeros(N, dtype=wp.float32, device=dev)
idx = wp.array(np.arange(N + 1 if BUG else N, dtype=np.int32) % (N + 1), device=dev)
counter = wp.array([4], dtype=wp.int32, device=dev)
flag = wp.zeros(1, dtype=wp.int32, device=dev)
running = wp.array([1], dtype=wp.int32, device=dev)
launches = [0]


def launch(kernel, dim, inputs):
    if HOW == "eager-debug":
        print(f"LAUNCH {launches[0]} {kernel.key}", flush=True)
    launches[0] += 1
    wp.launch(kernel, dim=dim, inputs=inputs, device=dev)


def step():
    if CASE == "launch":
        launch(scale, 128 if BUG else N, [x, y])
        launch(shift, N, [y, z])
    elif CASE == "rows":
        launch(shift, N, [x, z])
        launch(fill_rows, M, [a2, C + 1 if BUG else C])
    elif CASE == "indexed":
        view = wp.indexedarray(base, [idx])
        launch(shift, N, [x, z])
        launch(scatter, view.shape[0], [view, 1.5])
    elif CASE == "under":
        launch(shift, N, [x, z])
        launch(lookback, N, [z, y, N + 1 if BUG else N])
    elif CASE == "nested":
        def body():
            launch(count_down, 1, [counter, flag])

            def bad():
                launch(scale, 128 if BUG else N, [x, y])

            wp.capture_if(flag, on_true=bad)
            launch(shift, N, [y, z])
            wp.copy(running, counter)

        wp.capture_while(running, body)


if HOW == "eager-debug":
    step()
    wp.synchronize()
    print("DONE", flush=True)
    sys.exit(0)

import memcheck_kernels  # noqa: E402

wp.load_module(memcheck_kernels, device=dev)
inputs = {"x": x}
outputs = {"z": z}
if HOW == "stock":
    wp.capture_begin(device=dev, apic=True)
    step()
    graph = wp.capture_end()
    wp.capture_save(graph, OUT, inputs=inputs, outputs=outputs)
else:
    import wrpkit

    with wrpkit.capture(device=dev) as rec:
        step()
    rec.save(OUT, inputs=inputs, outputs=outputs)
