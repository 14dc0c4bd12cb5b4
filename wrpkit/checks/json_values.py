"""Values made safe for standard JSON, without numpy.

Reports (``wrp replay --json``, ``wrp regress --json``) hold numbers from numpy
and infinite relative errors; :func:`json_safe` turns them into what
``json.dumps(..., allow_nan=False)`` accepts.  It imports nothing: a report
that never touched numpy (a replay whose outputs wrp-replay summarised) does
not load it to be printed.
"""

from __future__ import annotations

import math


def json_safe(obj):
    """``obj`` with non-finite floats (an infinite relative error) as None and numpy scalars as Python
    ones, so that its JSON stays standard (``allow_nan=False``)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    # A numpy scalar (np.float32, np.int64, np.bool_...): its type lives in numpy and has .item().
    if type(obj).__module__ == "numpy" and getattr(obj, "ndim", None) == 0 and hasattr(obj, "item"):
        return json_safe(obj.item())
    return obj


__all__ = ["json_safe"]
