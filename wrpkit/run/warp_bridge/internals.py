"""The one adapter to Warp's internals (``warp._src``): nothing else in wrpkit names them.

Warp's public API (``warp``, ``warp.types``) is used everywhere else in ``run/``;
where wrpkit needs something only Warp's private modules hold, it asks one of
the functions here, each named for what it gives and saying which internal it
reads and why the public API does not suffice.  :data:`INTERNALS` lists every
internal read, with the kind of object it must be; ``tests/project/test_warp_adapter.py``
checks each against the installed Warp, so a Warp release that moves one fails
that test rather than a capture or a replay.

Every read goes through :func:`_internal`, which refuses a name
:data:`INTERNALS` does not list.  Warp is imported on call, never at import.
"""

from __future__ import annotations

import importlib
from typing import Optional

#: Every Warp internal this module reads: ``(module, dotted name, kind)``.  Kinds: ``function``,
#: ``class``, ``dict``, ``module`` (the name is ``""``: the module itself), ``runtime`` (an
#: attribute of Warp's started runtime object, ``warp._src.context.runtime``, so the name is
#: ``runtime.<attribute>``) and ``optional`` (a global that is None until Warp starts).
INTERNALS = (
    ("warp._src.types", "", "module"),
    ("warp._src.types", "concrete_array_type", "function"),
    ("warp._src.types", "_ARRAY_CTYPE_MAP", "dict"),
    ("warp._src.types", "warp_type_to_np_dtype", "dict"),
    ("warp._src.context", "runtime", "optional"),
    ("warp._src.context", "runtime._apic_capture", "runtime"),
    ("warp._src.context", "user_modules", "dict"),
    ("warp._src.context", "_get_cpu_target_hash", "function"),
)

_LISTED = {(mod, name) for mod, name, _ in INTERNALS}


def _internal(module: str, name: str = ""):
    """The Warp internal ``module.name`` (``module`` itself for ``""``); it must be listed in :data:`INTERNALS`.

    Raises:
        ImportError, AttributeError: The installed Warp does not have it (where it moved).
    """
    if (module, name) not in _LISTED:
        raise LookupError(f"{module}.{name} is not listed in wrpkit.run.warp_bridge.internals.INTERNALS")
    obj = importlib.import_module(module)
    for part in name.split(".") if name else ():
        obj = getattr(obj, part)
    return obj


def concrete_array_type(t) -> type:
    """The array class Warp's launch packs an array annotation or value ``t`` as.

    Reads ``warp._src.types.concrete_array_type``: the family check ``pack_arg``
    makes (``wp.array2d[float]``, ``wp.indexedarray(...)`` and fabric arrays
    resolve to their class); the public ``warp.types`` only says *whether* ``t``
    is an array (``is_array``), not which one.
    """
    return _internal("warp._src.types", "concrete_array_type")(t)


def array_descriptor_ctype(family: type) -> Optional[type]:
    """The ctypes descriptor (``array_t``, ``indexedarray_t``, ...) Warp passes for an array class; None if none.

    Reads ``warp._src.types._ARRAY_CTYPE_MAP``: the C layout of array arguments
    (needed to place arrays inside structs and to upgrade kernel arguments) is
    not in Warp's public API.
    """
    return _internal("warp._src.types", "_ARRAY_CTYPE_MAP").get(family)


def is_scalar_type(t) -> bool:
    """Whether ``t`` is one of Warp's scalar types (``wp.float32``, ``wp.handle``, ``wp.bool``, ...).

    Reads the keys of ``warp._src.types.warp_type_to_np_dtype``, Warp's own
    table of scalar types; the public ``warp.types.type_is_scalar`` leaves
    ``bool`` and ``handle`` out.
    """
    try:
        return t in _internal("warp._src.types", "warp_type_to_np_dtype")
    except TypeError:  # unhashable
        return False


def warp_type_named(name: str):
    """Warp's type object named ``name`` (``"float32"``, ``"vec3f"``, ``"bfloat16"``, ...), or None.

    Reads a name of the module ``warp._src.types``, where Warp defines every
    scalar, vector and matrix type under the name a capture records; the
    public ``warp`` namespace re-exports a selection of them, so a recorded
    name is resolved where Warp itself defines it.
    """
    return getattr(_internal("warp._src.types"), name, None)


def runtime_started() -> bool:
    """Whether Warp's runtime has started (``wp.init()`` has run) in this process.

    Reads ``warp._src.context.runtime``, None until Warp starts; the public API
    has no question for it (``wp.init()`` starts the runtime when asked).
    """
    try:
        return _internal("warp._src.context", "runtime") is not None
    except (ImportError, AttributeError):
        return False


def apic_capture():
    """Warp's APIC capture in progress (``runtime._apic_capture``), or None when none is (or Warp has not started).

    Reads ``warp._src.context.runtime._apic_capture``: the recorder of an
    ``apic=True`` capture, whose launch records wrpkit extends
    (``build_launch_info``) and reads call sites from; Warp does not expose it.
    """
    if not runtime_started():
        return None
    try:
        return _internal("warp._src.context", "runtime._apic_capture")
    except AttributeError:
        return None


def registered_module(name: str):
    """The ``wp.Module`` Warp registered under the Python module name ``name``, or None.

    Reads ``warp._src.context.user_modules``: the kernels a module defined
    through closures or factories are registered there and not reachable from
    the module's own names; ``wp.get_module`` would create a module that does
    not exist yet.
    """
    return _internal("warp._src.context", "user_modules").get(name)


def cpu_target_hash(flags: str) -> str:
    """The ``.cpu<hash>`` tag this host's Warp gives CPU objects built with ``flags`` (``""``, ``"-march=native"``).

    Reads ``warp._src.context._get_cpu_target_hash``: the tag (LLVM version,
    triple, ISA features) is part of a CPU object's file name and not otherwise
    exposed.
    """
    return _internal("warp._src.context", "_get_cpu_target_hash")(flags)


__all__ = ["INTERNALS", "apic_capture", "array_descriptor_ctype", "concrete_array_type", "cpu_target_hash",
           "is_scalar_type", "registered_module", "runtime_started", "warp_type_named"]
