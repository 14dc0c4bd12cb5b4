"""wrpkit: save, inspect, validate, convert, bundle and replay NVIDIA Warp captured graphs.

Light entry points (no Warp import): :func:`open_capture`, :mod:`wrpkit.formats.wrp1`,
:mod:`wrpkit.formats.wrpk`, :mod:`wrpkit.checks.validate`.  Runtime entry points import Warp
on first use: :func:`capture`, :func:`save`, :func:`load`.

The package's folders are its layers, each importing only from its own level or
below: the root (model, errors, fileio, environment), ``formats/`` (codecs),
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
    WrpModuleError,
    WrpOutOfMemoryError,
    WrpRuntimeError,
    WrpValidationError,
    WrpVersionError,
)

# Names resolved lazily so that `import wrpkit` never imports Warp.
_LAZY = {
    # Imported on first use, so that `import wrpkit.cli` (every `wrp` command) pays only for what it runs.
    "open_capture": "wrpkit.formats.container",
    "Capture": "wrpkit.formats.container",
    "capture": "wrpkit.run.recording",
    "begin_capture": "wrpkit.run.recording",
    "end_capture": "wrpkit.run.recording",
    "Recording": "wrpkit.run.recording",
    "save": "wrpkit.run.recording",
    "load": "wrpkit.run.runtime",
    "Program": "wrpkit.run.runtime",
    "upgrade": "wrpkit.run.upgrade",
    "trace": "wrpkit.debug.trace",
    "slice": "wrpkit.debug.slice",
    "diff": "wrpkit.debug.diff",
    "verify": "wrpkit.debug.verify",
}


# Where each module lived before the package was split into layer folders.  The
# old names keep working for one release, with a DeprecationWarning, through an
# import hook, so that the package root holds no stub files.
_MOVED = {
    "wrp1": "wrpkit.formats.wrp1", "wrp1_layout": "wrpkit.formats.wrp1_layout", "wrpk": "wrpkit.formats.wrpk",
    "jsonform": "wrpkit.formats.jsonform", "annotations": "wrpkit.formats.annotations",
    "convert": "wrpkit.formats.convert", "container": "wrpkit.formats.container", "fbs": "wrpkit.formats.fbs",
    "validate": "wrpkit.checks.validate", "check": "wrpkit.checks.check", "elf": "wrpkit.checks.elf",
    "summary": "wrpkit.checks.summary", "recording": "wrpkit.run.recording", "runtime": "wrpkit.run.runtime",
    "replaycli": "wrpkit.cli.replay",
    "extents": "wrpkit.formats.launch_arrays",
}


class _MovedModuleFinder:
    """Resolves ``wrpkit.<old name>`` to the module's new home, with a DeprecationWarning."""

    _real_specs: dict = {}

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        prefix, _, name = fullname.partition(".")
        if prefix != "wrpkit" or name not in _MOVED:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(fullname, cls)

    @staticmethod
    def create_module(spec):
        import importlib
        import warnings

        new = _MOVED[spec.name.split(".", 1)[1]]
        warnings.warn(f"{spec.name} moved to {new}; the old name goes away in the next release", DeprecationWarning,
                      stacklevel=4)
        module = importlib.import_module(new)
        _MovedModuleFinder._real_specs[id(module)] = module.__spec__
        return module

    @staticmethod
    def exec_module(module):
        # The import system stamps the alias's spec on the module it was given;
        # give the real module its own spec back.
        module.__spec__ = _MovedModuleFinder._real_specs.pop(id(module), module.__spec__)


def _install_moved_finder():
    import sys

    if not any(f is _MovedModuleFinder for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder)


_install_moved_finder()


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'wrpkit' has no attribute {name!r}")


__all__ = [
    "__version__", "Capture", "open_capture", "WrpError", "WrpFormatError", "WrpVersionError", "WrpIntegrityError",
    "WrpValidationError", "WrpModuleError", "WrpOutOfMemoryError", "WrpDeviceError", "WrpBindingError", "WrpRuntimeError", "WrpCrashError",
    *_LAZY,
]
