"""Summary statistics of a binding's values, computed where the data is.

:func:`stats` is what ``wrp replay``'s outputs table shows.  It runs in the
process that holds the data (the replay child, over Warp's memory in place),
so that a summary costs no copy of the binding.  It needs no Warp.
"""

from __future__ import annotations

import math

import numpy as np


def _num(x):
    if x is None:
        return None
    if isinstance(x, (np.bool_, bool)):
        return int(x)
    if isinstance(x, (np.integer, int)):
        return int(x)
    x = float(x)
    return x if math.isfinite(x) else None


#: Elements per slice when summarizing or comparing outputs: the temporaries
#: (float64 copies, masks) stay a few MiB however large a binding is.
_SLICE = 1 << 20


def _slices(n: int):
    for i in range(0, n, _SLICE):
        yield slice(i, min(i + _SLICE, n))


def stats(arr: np.ndarray) -> dict:
    """shape, dtype, min, max, mean (over finite values), NaN and Inf counts.

    Works through the array in slices, so a binding of any size costs little
    memory beyond itself.
    """
    out = {"shape": list(arr.shape), "dtype": str(arr.dtype), "min": None, "max": None, "mean": None,
           "nan": 0, "inf": 0}
    if arr.dtype.names is not None or arr.dtype.kind == "V":
        out["dtype"] = "struct" if arr.dtype.names is not None else str(arr.dtype)
        return out
    if arr.size == 0:
        return out
    a = arr.reshape(-1)
    if a.dtype.kind == "f":
        nan = inf = count = 0
        total = 0.0
        lo = hi = None
        for sl in _slices(a.size):
            c = a[sl]
            finite = np.isfinite(c)
            n_nan = int(np.isnan(c).sum())
            nan += n_nan
            inf += c.size - int(finite.sum()) - n_nan
            f = c[finite]
            if f.size:
                cmin, cmax = f.min(), f.max()
                lo = cmin if lo is None or cmin < lo else lo
                hi = cmax if hi is None or cmax > hi else hi
                total += float(f.sum(dtype=np.float64))
                count += f.size
        out["nan"], out["inf"] = nan, inf
        if count:
            out["min"], out["max"], out["mean"] = _num(lo), _num(hi), _num(total / count)
        return out
    # Integers and booleans: reductions that do not copy the array.
    out["min"], out["max"] = _num(a.min()), _num(a.max())
    out["mean"] = _num(a.mean(dtype=np.float64))
    return out


def raw_stats(arr: np.ndarray) -> dict:
    """The stats of an untyped binding (raw bytes): its size only; min/max/mean of bytes mean nothing."""
    return {"shape": list(arr.shape), "dtype": "raw bytes", "min": None, "max": None, "mean": None,
            "nan": None, "inf": None, "raw": True}


def view_spec(sig) -> dict:
    """How to view a region's bytes as the typed array of signature ``sig`` (what
    :func:`wrpkit.formats.annotations.view_region` makes), as JSON-able data for a
    process that holds the bytes: ``{"dtype", "shape", "strides", "offset"}``, or
    ``{"struct": True, "shape"}`` for a struct binding."""
    from ..formats import annotations as ann  # noqa: PLC0415

    base, trailing = ann.element_layout(sig.dtype)
    inner, step = [], base.itemsize
    for d in reversed(trailing):
        inner.append(step)
        step *= d
    shape = [int(d) for d in sig.shape] + [int(d) for d in trailing]
    if base.names is not None:
        return {"struct": True, "shape": shape}
    return {"dtype": base.str, "shape": shape, "strides": [int(s) for s in sig.strides] + list(reversed(inner)),
            "offset": int(sig.byte_offset)}


def like_spec(arr: np.ndarray) -> dict:
    """The spec (see :func:`view_spec`) typing a whole region like ``arr`` (same bytes, C order)."""
    arr = np.asarray(arr)
    if arr.dtype.names is not None:
        return {"struct": True, "shape": list(arr.shape)}
    if arr.dtype == np.uint8:
        return {"raw": True, "shape": list(arr.shape)}
    strides, step = [], arr.dtype.itemsize
    for d in reversed(arr.shape):
        strides.append(step)
        step *= int(d)
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "strides": list(reversed(strides)), "offset": 0}


def region_stats(region: np.ndarray, spec) -> dict:
    """:func:`stats` of a binding's region bytes (``uint8``) viewed per ``spec``, in place.

    Args:
        region: The whole region (the replay's memory itself, not a copy).
        spec: From :func:`view_spec` or :func:`like_spec`; None for a binding
            without a type (:func:`raw_stats`).
    """
    if spec is None or spec.get("raw"):
        out = raw_stats(region)
        if spec is not None:
            out["shape"] = list(spec["shape"])
        return out
    if spec.get("struct"):
        return {"shape": list(spec["shape"]), "dtype": "struct", "min": None, "max": None, "mean": None,
                "nan": 0, "inf": 0}
    dtype, shape = np.dtype(spec["dtype"]), tuple(int(d) for d in spec["shape"])
    if region.nbytes == 0 or 0 in shape:
        return stats(np.empty(shape, dtype=dtype))
    arr = np.ndarray(shape, dtype=dtype, buffer=region, offset=int(spec["offset"]),
                     strides=tuple(int(s) for s in spec["strides"]))
    return stats(arr)


__all__ = ["stats", "raw_stats", "region_stats", "view_spec", "like_spec"]
