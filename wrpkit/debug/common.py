"""What trace, slice and verify share: opening a capture and binding inputs."""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ..errors import WrpBindingError, WrpUsageError
from ..formats import annotations as ann


def open_program(source, modules: Optional[Mapping] = None, *, _validated: bool = False):
    """Decode and validate a capture (path or bytes) as :func:`wrpkit.load` does, without loading it: the
    :class:`~wrpkit.run.load.prepare.Prepared` capture every tool of this layer works on.

    ``_validated`` (internal): ``source`` holds bytes this or a parent
    process validated; not validated again.

    Raises:
        WrpFormatError, WrpValidationError, WrpModuleError: The capture is invalid.
    """
    from ..run.load.prepare import prepare  # noqa: PLC0415

    return prepare(source, modules, verify_checksums=not _validated, allow_raw_pointers=_validated,
                   _validated=_validated)


def input_bytes(opened, inputs: Optional[Mapping], read_raw) -> dict:
    """Check inputs against their bindings; return ``{region_id: full region bytes}``.

    Args:
        opened: The capture.
        inputs: ``{binding name: array}`` (numpy, ``wp.array`` or bytes-like).
        read_raw: ``read_raw(region_id) -> np.ndarray`` of the region's current
            bytes (for bindings whose signature is a view of the region).

    Raises:
        WrpBindingError: Unknown name, wrong size or dtype.
    """
    from ..run.load.prepare import coerce_input, unknown_binding  # noqa: PLC0415

    if not inputs:
        return {}
    if not isinstance(inputs, Mapping):
        raise WrpBindingError(f"inputs must be a mapping of binding name to array, got {type(inputs).__name__}")
    region_of = {b.name: b.region_id for b in opened.model.bindings}
    out = {}
    for name, value in inputs.items():
        if name not in opened.sizes:
            raise unknown_binding(name, list(opened.sizes))
        size, sig = opened.sizes[name], opened.signature.get(name)
        arr = coerce_input(name, value, size, sig)
        rid = region_of[name]
        if arr.nbytes == size:
            out[rid] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        else:
            raw = np.array(out[rid] if rid in out else read_raw(rid), copy=True)
            ann.view_region(raw, sig)[...] = arr
            out[rid] = raw
    return out


def parse_range(spec, n: int) -> tuple:
    """``"A:B"`` (either side may be empty, negative counts from the end) as ``(A, B)`` within ``[0, n]``.

    Raises:
        WrpUsageError: Not a range, or an empty one (exit 2).
    """
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        a, b = spec
    else:
        text = str(spec)
        if ":" not in text:
            raise WrpUsageError(f"op range {text!r} is not of the form A:B", hint="For example --ops 10:20.")
        sa, sb = text.split(":", 1)
        try:
            a = int(sa) if sa.strip() else 0
            b = int(sb) if sb.strip() else n
        except ValueError:
            raise WrpUsageError(f"op range {text!r} is not of the form A:B with integers",
                           hint="For example --ops 10:20.") from None
    a, b = int(a if a is not None else 0), int(b if b is not None else n)
    if a < 0:
        a += n
    if b < 0:
        b += n
    if not (0 <= a < b <= n):
        raise WrpUsageError(f"op range {a}:{b} is empty or outside the program's {n} top-level ops",
                       hint=f"Pick A < B within 0:{n} (`wrp inspect --ops` numbers them).")
    return a, b
