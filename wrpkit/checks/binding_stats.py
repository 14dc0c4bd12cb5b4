"""Summary statistics of a binding's values, computed where the data is.

:func:`stats` is what ``wrp replay``'s outputs table shows.  It runs in the
process that holds the data (the replay child, over Warp's memory in place),
so that a summary costs no copy of the binding.  It needs no Warp.
"""

from __future__ import annotations

# numpy (and compare, which needs it) is imported where an array is summarised: a replay whose
# outputs the file types is summarised by wrp-replay itself, and its parent never loads numpy.


def stats(arr: np.ndarray) -> dict:
    """shape, dtype, min, max, mean (over finite values), NaN and Inf counts
    (:func:`wrpkit.checks.compare.array_stats`, the one NaN-aware summary)."""
    from .compare import array_stats  # noqa: PLC0415

    return array_stats(arr)


def with_warp_shape(summary: dict, sig) -> dict:
    """A typed binding's summary in the one shape convention (docs/op-table.md).

    ``shape`` and ``dtype`` become Warp's (a vec3f array of 8 is ``[8]``,
    ``"vec3f"``) and ``numpy_shape`` the numpy view's (``[8, 3]``).  A raw or
    untyped summary is returned as it is.
    """
    if sig is None or summary.get("raw"):
        return summary
    out = dict(summary)
    out["numpy_shape"] = list(summary["shape"])
    if summary.get("dtype") != "struct":
        out["shape"], out["dtype"] = [int(d) for d in sig.shape], sig.dtype.name
    else:
        out["shape"] = [int(d) for d in sig.shape]
    return out


def raw_stats(arr: np.ndarray) -> dict:
    """The stats of an untyped binding (raw bytes): its size only; min/max/mean of bytes mean nothing."""
    return raw_stats_of(list(arr.shape))


def raw_stats_of(shape: list) -> dict:
    """:func:`raw_stats` of an untyped binding of ``shape`` (its data not read)."""
    return {"shape": list(shape), "dtype": "raw bytes", "min": None, "max": None, "mean": None,
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
    import numpy as np  # noqa: PLC0415

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
    import numpy as np  # noqa: PLC0415

    dtype, shape = np.dtype(spec["dtype"]), tuple(int(d) for d in spec["shape"])
    if region.nbytes == 0 or 0 in shape:
        return stats(np.empty(shape, dtype=dtype))
    arr = np.ndarray(shape, dtype=dtype, buffer=region, offset=int(spec["offset"]),
                     strides=tuple(int(s) for s in spec["strides"]))
    return stats(arr)


def stats_spec(sig, size: int, hint=None):
    """How to type a binding for the outputs table: per its signature ``sig``, else like ``hint`` (an
    input or golden array given for it) when the byte sizes agree, else None (raw bytes).

    Args:
        sig: The binding's ``ArraySignature``, or None.
        size: The binding's region size in bytes.
        hint: An array given for it, or None.

    Returns:
        A spec for :func:`region_stats`, or None.
    """
    if sig is not None:
        return view_spec(sig)
    if hint is not None:
        import numpy as np  # noqa: PLC0415

        hint = np.asarray(hint)
        if not hint.dtype.hasobject and hint.nbytes == size:
            return like_spec(hint)
    return None


def _percentile(v: list, q: float) -> float:
    """The q-quantile of sorted ``v``, interpolated between ranks (numpy's default; wrp-replay's too)."""
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def timing_summary(values) -> dict | None:
    """``{"min", "p5", "median", "p95", "max", "mean", "count"}`` of per-replay times, or None without any."""
    if not values:
        return None
    v = sorted(values)
    n = len(v)
    return {"min": v[0], "p5": _percentile(v, 0.05), "median": _percentile(v, 0.5), "p95": _percentile(v, 0.95),
            "max": v[-1], "mean": sum(v) / n, "count": n}


__all__ = ["stats", "raw_stats", "raw_stats_of", "region_stats", "view_spec", "like_spec", "with_warp_shape", "stats_spec",
           "timing_summary"]
