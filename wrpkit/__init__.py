"""wrpkit: save, inspect, validate, convert, bundle and replay NVIDIA Warp captured graphs.

Light entry points (no Warp import): :func:`open_capture`, :mod:`wrpkit.wrp1`,
:mod:`wrpkit.wrpk`, :mod:`wrpkit.validate`.  Runtime entry points import Warp
on first use: :func:`capture`, :func:`save`, :func:`load`.
"""

# No `from __future__ import annotations` here: it would bind the name
# `annotations` in this package and shadow the submodule wrpkit.annotations.

__version__ = "0.1.0"

from .container import Capture, open_capture  # noqa: E402
from .errors import (  # noqa: E402
    WrpBindingError,
    WrpDeviceError,
    WrpError,
    WrpFormatError,
    WrpIntegrityError,
    WrpModuleError,
    WrpRuntimeError,
    WrpValidationError,
    WrpVersionError,
)

# Names resolved lazily so that `import wrpkit` never imports Warp.
_LAZY = {
    "capture": "wrpkit.recording",
    "begin_capture": "wrpkit.recording",
    "end_capture": "wrpkit.recording",
    "Recording": "wrpkit.recording",
    "save": "wrpkit.recording",
    "load": "wrpkit.runtime",
    "Program": "wrpkit.runtime",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'wrpkit' has no attribute {name!r}")


__all__ = [
    "__version__", "Capture", "open_capture", "WrpError", "WrpFormatError", "WrpVersionError", "WrpIntegrityError",
    "WrpValidationError", "WrpModuleError", "WrpDeviceError", "WrpBindingError", "WrpRuntimeError", *_LAZY,
]
