"""The types of a Warp kernel's arguments, as Warp itself resolved them: the one place wrpkit asks.

Warp accepts many spellings of one argument type: ``wp.array(dtype=float)``,
``wp.array[float]``, ``wp.array2d(dtype=float)``, ``wp.array2d[float]``,
``wp.array(dtype=float, ndim=2)``, ``wp.indexedarray[...]``, fabric arrays,
``@wp.struct`` s (holding arrays or not), vectors, matrices, ``wp.uint64``
handles, with or without ``from __future__ import annotations``.  Warp resolves
every spelling when it builds the kernel's :class:`Adjoint`: ``kernel.adj.args``
holds one ``Var`` per argument whose ``type`` is the object Warp's launch packs
the argument against (``pack_arg``).  wrpkit never re-reads the annotation: it
asks that object for its array family (Warp's ``concrete_array_type``, read
through :mod:`wrpkit.run.warp_bridge.internals`: the same family check the launch
makes), dimensionality, element type and C layout, here, and every consumer (``--kernels`` matching and typing in
:mod:`wrpkit.run.capture.source_types`, ``wrp upgrade --kernels`` in
:mod:`wrpkit.run.load.upgrade`) reads :func:`kernel_argument_types`.

Example::

    types = kernel_argument_types(kernel)
    types[0].family, types[0].ndim, types[0].dtype.name    # ("array", 2, "float32")
    [s.path for s in types[2].arrays]                     # ["s.pos", "s.vel"]
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Optional

from ...records import record
from ...formats import annotations as ann
from ..warp_bridge.dtypes import array_ctype as _array_ctype
from ..warp_bridge.dtypes import array_family as _family

_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@record(frozen=True)
class ArraySlot:
    """One array descriptor inside a kernel argument (the argument itself, or an array field of a struct).

    Attributes:
        path: ``"x"`` for an array argument, ``"s.pos"`` for a struct's array field (``"s.inner.pos"`` nested).
        offset: Byte offset of the descriptor inside the argument's packed value.
        family: ``"array"``, ``"indexedarray"``, ``"fabricarray"`` or ``"indexedfabricarray"``.
        ndim: Dimensions, as Warp resolved them (0 where Warp leaves them generic).
        dtype: The element type, or None when Warp leaves it generic (``Any``).
    """

    path: str
    offset: int
    family: str
    ndim: int
    dtype: Optional[ann.DataType]


@record(frozen=True)
class ArgumentType:
    """One kernel argument's type, read from the object Warp resolved for it.

    Attributes:
        name: The argument's name.
        warp_type: ``kernel.adj.args[i].type``: what Warp's launch packs the argument against.
        family: The array family (``"array"``, ``"indexedarray"``, ...), None for a non-array.
        ndim: An array's dimensions (0 for a non-array).
        dtype: An array's element type, or a value's own type; None when Warp's type is generic.
        ctype: The ctypes class Warp passes (``array_t``, a struct's ctype, ``c_float``...), or None.
        size, alignment: Of ``ctype`` (0 when unknown).
        arrays: Every :class:`ArraySlot` inside the argument, in byte order.
        problem: Why the C layout is unknown (None when it is known).
    """

    name: str
    warp_type: object
    family: Optional[str]
    ndim: int
    dtype: Optional[ann.DataType]
    ctype: Optional[type]
    size: int
    alignment: int
    arrays: tuple = ()
    problem: Optional[str] = None

    @property
    def is_array(self) -> bool:
        return self.family is not None


def _value_ctype(t) -> Optional[type]:
    """The ctypes class of a non-array argument (struct, vector, matrix, scalar, handle), or None."""
    from warp.types import type_is_struct  # noqa: PLC0415

    if type_is_struct(t):
        return t.ctype
    if isinstance(t, type) and issubclass(t, (ctypes.Array, ctypes.Structure, ctypes._SimpleCData)):
        return t
    ct = getattr(t, "_type_", None)
    if isinstance(ct, type) and issubclass(ct, ctypes._SimpleCData):
        return ct
    if t in (float, int, bool):
        return {float: ctypes.c_float, int: ctypes.c_int32, bool: ctypes.c_bool}[t]
    return None


def _element_dtype(t) -> Optional[ann.DataType]:
    from ..warp_bridge.dtypes import dtype_from_warp  # noqa: PLC0415

    try:
        return dtype_from_warp(t)
    except (TypeError, KeyError):
        return None  # generic (Any) or a type wrpkit has no name for


def _ndim(t) -> int:
    n = getattr(t, "ndim", 0)
    return int(n) if isinstance(n, int) else 0


def _struct_slots(t, prefix: str, base: int) -> list:
    """Array slots of a ``@wp.struct`` (nested structs walked), offsets from Warp's own ctype."""
    from warp.types import type_is_struct  # noqa: PLC0415

    out = []
    for fname, var in t.vars.items():
        off = base + getattr(t.ctype, fname).offset
        fam = _family(var.type)
        if fam is not None:
            out.append(ArraySlot(f"{prefix}.{fname}", off, fam.__name__, _ndim(var.type),
                                 _element_dtype(var.type.dtype)))
        elif type_is_struct(var.type):
            out.extend(_struct_slots(var.type, f"{prefix}.{fname}", off))
    return out


def argument_type(name: str, t) -> ArgumentType:
    """The :class:`ArgumentType` of one resolved Warp type (``kernel.adj.args[i].type`` or a struct field's)."""
    from warp.types import type_is_struct, type_repr  # noqa: PLC0415

    fam = _family(t)
    if fam is not None:
        ctype = _array_ctype(fam)
        problem = None if ctype is not None else (
            f"argument {name} is a wp.{fam.__name__}, which a kernel argument cannot be")
        slots = (ArraySlot(name, 0, fam.__name__, _ndim(t), _element_dtype(t.dtype)),)
        return ArgumentType(name, t, fam.__name__, _ndim(t), _element_dtype(t.dtype), ctype,
                            ctypes.sizeof(ctype) if ctype else 0, ctypes.alignment(ctype) if ctype else 0,
                            slots, problem)
    ctype = _value_ctype(t)
    problem = None
    if ctype is None:
        try:
            shown = type_repr(t)
        except Exception:  # noqa: BLE001
            shown = repr(t)
        problem = f"argument {name} has type {shown}, whose C layout wrpkit cannot determine"
    slots = tuple(_struct_slots(t, name, 0)) if type_is_struct(t) else ()
    return ArgumentType(name, t, None, 0, _element_dtype(t), ctype, ctypes.sizeof(ctype) if ctype else 0,
                        ctypes.alignment(ctype) if ctype else 0, slots, problem)


def kernel_argument_types(kernel) -> tuple:
    """One :class:`ArgumentType` per argument of a Warp kernel, in declaration order, from ``kernel.adj.args``.

    Warp resolves every annotation spelling when it defines the kernel; this
    reads the objects it resolved (cached per kernel).  Never raises for a
    type wrpkit cannot lay out: that argument's ``problem`` says why.

    Args:
        kernel: A ``wp.Kernel``.
    """
    try:
        return _cache[kernel]
    except (KeyError, TypeError):
        pass
    out = tuple(argument_type(v.label, v.type) for v in kernel.adj.args)
    try:
        _cache[kernel] = out
    except TypeError:
        pass
    return out


__all__ = ["ArgumentType", "ArraySlot", "argument_type", "kernel_argument_types"]
