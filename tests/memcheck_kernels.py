"""The kernels of ``tests/memcheck_program.py``, in a file of their own, as ``--kernels`` takes them."""

import warp as wp


@wp.kernel
def scale(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = x[i] * 2.0


@wp.kernel
def shift(y: wp.array(dtype=wp.float32), z: wp.array(dtype=wp.float32)):
    i = wp.tid()
    z[i] = y[i] + 1.0


@wp.kernel
def fill_rows(a: wp.array2d(dtype=wp.float32), ncols: int):
    i = wp.tid()
    for j in range(ncols):
        a[i, j] = float(i * 10 + j)


@wp.kernel
def scatter(dst: wp.indexedarray(dtype=wp.float32), v: wp.float32):
    i = wp.tid()
    dst[i] = v


@wp.kernel
def lookback(a: wp.array(dtype=wp.float32), d: wp.array(dtype=wp.float32), back: int):
    i = wp.tid()
    d[i] = a[i] - a[i - back]  # Warp wraps an index in [-n, 0) as Python does; below -n is out of bounds


@wp.kernel
def count_down(counter: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] - 1
    flag[0] = wp.where(counter[0] == 1, 1, 0)
