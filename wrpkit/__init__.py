"""wrpkit: save, inspect, validate, convert, bundle and replay NVIDIA Warp captured graphs.

Light entry points (no Warp import): :func:`open_capture`, :mod:`wrpkit.formats.wrp1`,
:mod:`wrpkit.formats.wrpk`, :mod:`wrpkit.checks.validate`.  Runtime entry points import Warp
on first use: :func:`capture`, :func:`save`, :func:`load`.

The package's folders are its layers, each importing only from its own level or
below: the root (model, errors, file access, environment), ``formats/`` (codecs),
``checks/`` (validation, preflight), ``run/`` (capture and replay), ``debug/``
(trace, slice, diff, verify) and ``cli/`` (the ``wrp`` command line).
"""

# No `from __future__ import annotations` here: it would bind the name
# `annotations` in this package and shadow the submodule wrpkit.formats.annotations.

__version__ = "0.1.0"

from .errors import (  # noqa: E402
                     WrpBindingError,
                     WrpCrashError,
                     WrpDeviceError,
                     WrpError,
                     WrpFormatError,
                     WrpIntegrityError,
                     WrpKernelsError,
                     WrpModuleError,
                     WrpOutOfMemoryError,
                     WrpUsageError,
                     WrpRuntimeError,
                     WrpValidationError,
                     WrpVersionError,
                     )

# Names resolved lazily so that `import wrpkit` never imports Warp.
_LAZY = {
    # Imported on first use, so that `import wrpkit.cli` (every `wrp` command) pays only for what it runs.
    "open_capture": "wrpkit.formats.container",
    "Capture": "wrpkit.formats.container",
    "capture": "wrpkit.run.capture.recording",
    "begin_capture": "wrpkit.run.capture.recording",
    "end_capture": "wrpkit.run.capture.recording",
    "Recording": "wrpkit.run.capture.recording",
    "save": "wrpkit.run.capture.recording",
    "load": "wrpkit.run.replay.runtime",
    "Program": "wrpkit.run.load.program",
    "upgrade": "wrpkit.run.load.upgrade",
    "annotate": "wrpkit.run.capture.source_types",
    "trace": "wrpkit.debug.trace",
    "slice": "wrpkit.debug.slice",
    "diff": "wrpkit.debug.diff",
    "verify": "wrpkit.debug.verify",
    "regress": "wrpkit.run.regress.runner",
    "profile": "wrpkit.debug.profile",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'wrpkit' has no attribute {name!r}")


__all__ = [
    "__version__", "Capture", "open_capture", "WrpError", "WrpFormatError", "WrpVersionError", "WrpIntegrityError",
    "WrpValidationError", "WrpModuleError", "WrpOutOfMemoryError", "WrpDeviceError", "WrpBindingError", "WrpRuntimeError", "WrpCrashError",
    "WrpKernelsError", "WrpUsageError", *_LAZY,
]
