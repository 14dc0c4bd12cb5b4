"""Warp's types as annotation data types, and back.

:class:`~wrpkit.formats.annotations.DataType` describes an element type without
Warp; this module is the one place that maps Warp's types (scalars, vectors,
matrices, quaternions, transforms, ``@wp.struct`` s and the C layout of array
fields) to it (:func:`dtype_from_warp`, :func:`signature_of_array`) and back
(:func:`warp_dtype`).  It imports Warp on call, never at import, and lives in
``run/`` because ``formats/`` never imports Warp.
"""

from __future__ import annotations

from typing import Optional

from ...formats import annotations as ann
import numpy as np

#: Scalar kind of each Warp scalar type name ("float32" -> FLOAT32).
_KIND_BY_NAME = {v: k for k, v in ann.SCALAR_NAMES.items()}


def _kind_of_numpy(npd: np.dtype) -> int:
    npd = np.dtype(npd)
    for k, v in ann.scalar_numpy().items():
        if v.kind == npd.kind and v.itemsize == npd.itemsize:
            return k
    return ann.ScalarKind.UNKNOWN


def _dtype_from_ctype(ctype, name: str) -> ann.DataType:
    """ann.DataType of a plain ctypes type (the array_t/indexedarray_t fields of structs)."""
    import ctypes  # noqa: PLC0415

    if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
        fields = []
        for fname, ftype in ctype._fields_:
            off = getattr(ctype, fname).offset
            fields.append(ann.StructField(fname, off, _dtype_from_ctype(ftype, fname)))
        return ann.DataType(name, ann.ScalarKind.UNKNOWN, (), ctypes.sizeof(ctype), tuple(fields))
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        inner = _dtype_from_ctype(ctype._type_, name)
        if inner.fields or inner.shape:
            # arrays of structs / nested arrays: keep them opaque
            return ann.DataType(f"{inner.name}[{ctype._length_}]", ann.ScalarKind.UNKNOWN, (), ctypes.sizeof(ctype))
        return ann.DataType(f"{inner.name}[{ctype._length_}]", inner.scalar, (ctype._length_,), ctypes.sizeof(ctype))
    if ctype is ctypes.c_void_p:
        return ann.DataType("uint64", ann.ScalarKind.UINT64, (), 8)
    kind = _kind_of_numpy(np.dtype(ctype))
    return ann.DataType(ann.SCALAR_NAMES.get(kind, name), kind, (), ctypes.sizeof(ctype))


def _warp_name(t) -> str:
    from warp.types import type_repr  # noqa: PLC0415

    name = getattr(t, "__name__", None)
    if name in (None, "vec_t", "mat_t", "quat_t", "transform_t"):
        return type_repr(t)
    return name


def dtype_from_warp(t) -> ann.DataType:
    """The ann.DataType of a Warp element type.

    Args:
        t: A Warp scalar type (``wp.float32``), vector, matrix, quaternion,
            transform or spatial type, a ``@wp.struct``, or an array type
            (as found among struct fields).

    Raises:
        TypeError: ``t`` is not a Warp data type.
    """
    import warp as wp  # noqa: PLC0415
    import warp.types as wt  # noqa: PLC0415

    from .internals import is_scalar_type  # noqa: PLC0415

    if t is float:
        t = wp.float32
    elif t is int:
        t = wp.int32
    elif t is bool:
        t = wp.bool
    if wt.type_is_struct(t):
        qual = getattr(getattr(t, "cls", None), "__qualname__", None) or t.key
        mod = getattr(getattr(t, "cls", None), "__module__", None)
        name = f"{mod}.{qual}" if mod else qual
        fields = []
        for fname, var in t.vars.items():
            off = getattr(t.ctype, fname).offset
            fields.append(ann.StructField(fname, off, _field_dtype(var.type)))
        return ann.DataType(name, ann.ScalarKind.UNKNOWN, (), wt.type_size_in_bytes(t), tuple(fields))
    if wt.is_array(t):
        raise TypeError(f"{wt.type_repr(t)} is an array type, not an element type")
    if hasattr(t, "_wp_scalar_type_") and hasattr(t, "_shape_"):
        scalar = dtype_from_warp(t._wp_scalar_type_)
        return ann.DataType(_warp_name(t), scalar.scalar, tuple(int(d) for d in t._shape_), wt.type_size_in_bytes(t))
    if is_scalar_type(t):
        name = t.__name__
        if name == "handle":
            return ann.DataType("handle", ann.ScalarKind.UINT64, (), 8)
        if name == "bfloat16":
            return ann.DataType("bfloat16", ann.ScalarKind.UNKNOWN, (), 2)
        return ann.DataType(name, _KIND_BY_NAME[name], (), wt.type_size_in_bytes(t))
    raise TypeError(f"{t!r} is not a Warp data type")


def array_family(t) -> Optional[type]:
    """The array class Warp's launch expects for ``t`` (its own ``concrete_array_type``), None for a non-array."""
    from warp.types import is_array  # noqa: PLC0415

    from .internals import concrete_array_type  # noqa: PLC0415

    if not is_array(t):
        return None
    return concrete_array_type(t)


def array_ctype(family: type) -> Optional[type]:
    """The descriptor ctypes class Warp passes for an array family; None for a class that is not one."""
    from .internals import array_descriptor_ctype  # noqa: PLC0415

    return array_descriptor_ctype(family)


def _field_dtype(t) -> ann.DataType:
    """ann.DataType of a struct field: element types, or the C layout of array fields."""
    import warp as wp  # noqa: PLC0415
    import warp.types as wt  # noqa: PLC0415

    if wt.is_array(t):
        # The descriptor Warp packs for the field's array family (wp.indexedarray[...] and
        # wp.indexedarray(...) alike): asked of Warp's resolved type, as for kernel arguments.
        ctype = array_ctype(array_family(t)) or array_ctype(wp.array)
        return _dtype_from_ctype(ctype, wt.type_repr(t))
    return dtype_from_warp(t)


def warp_dtype(dt: ann.DataType):
    """The Warp element type of a ann.DataType, or None for structs and opaque types."""
    import warp as wp  # noqa: PLC0415
    import warp.types as wt  # noqa: PLC0415

    from .internals import is_scalar_type, warp_type_named  # noqa: PLC0415

    if dt.fields:
        return None
    if dt.name == "bfloat16":
        return warp_type_named("bfloat16")
    known = warp_type_named(dt.name)
    if isinstance(known, type) and is_scalar_type(known) and not dt.shape:
        if dt.name == "handle":
            return wp.uint64
        return known
    if isinstance(known, type) and hasattr(known, "_shape_") and tuple(known._shape_) == tuple(dt.shape):
        return known
    if dt.scalar == ann.ScalarKind.UNKNOWN:
        return None
    scalar = warp_type_named(ann.SCALAR_NAMES[ann.ScalarKind(dt.scalar)])
    if not dt.shape:
        return scalar
    if dt.name.startswith("quat") and len(dt.shape) == 1:
        return wt.quaternion(dtype=scalar)
    if dt.name.startswith("transform") and len(dt.shape) == 1:
        return wt.transformation(dtype=scalar)
    if len(dt.shape) == 1:
        return wt.vector(length=int(dt.shape[0]), dtype=scalar)
    if len(dt.shape) == 2:
        return wt.matrix(shape=tuple(int(d) for d in dt.shape), dtype=scalar)
    return None


def signature_of_array(name: str, arr, byte_offset: int = 0, is_input: bool = False,
                       is_output: bool = False) -> ann.ArraySignature:
    """The ann.ArraySignature of a ``wp.array`` (its element type, shape and byte strides).

    Args:
        name: Binding name.
        arr: The array (a view or a whole allocation).
        byte_offset: Offset of ``arr``'s first element in its base allocation.
    """
    return ann.ArraySignature(
        name=name,
        dtype=dtype_from_warp(arr.dtype),
        shape=tuple(int(d) for d in arr.shape),
        strides=tuple(int(s) for s in arr.strides),
        byte_offset=int(byte_offset),
        is_input=bool(is_input),
        is_output=bool(is_output),
    )


__all__ = ["array_ctype", "array_family", "dtype_from_warp", "warp_dtype", "signature_of_array"]
