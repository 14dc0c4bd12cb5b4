"""Warp's APIC enumerations: the numbers a captured graph's records hold.

Names and values are Warp's (``warp/native/apic_types.h``): the device family, the op types of
APIC format 18, relocation kinds, the scalar types and reduction kinds of the sort, scan and
reduction ops, and a CUDA module's binary kind and compile-fallback reason.
"""

from __future__ import annotations

import enum


class DeviceType(enum.IntEnum):
    """Device family of a graph (Warp's ``APICDeviceType``)."""

    CUDA = 0
    CPU = 1


class OpType(enum.IntEnum):
    """Operation types of APIC format 18; names are Warp's ``APIC_OP_*`` names."""

    KERNEL_LAUNCH = 1
    MEMCPY_H2D = 2
    MEMCPY_D2H = 3
    MEMCPY_D2D = 4
    MEMSET = 5
    ALLOC = 6
    IF = 7
    WHILE = 8
    SCAN = 9
    MEMTILE = 10
    SEGMENTED_SORT = 11
    RADIX_SORT = 12
    RUNLENGTH_ENCODE = 13
    BSR_FROM_TRIPLETS = 14
    BSR_TRANSPOSE = 15
    REDUCTION = 16
    BVH_REFIT = 17
    BVH_REBUILD = 18
    HASH_GRID_UPDATE = 19


class RelocKind(enum.IntEnum):
    """What a relocation writes into an argument slot (``APICRelocKind``)."""

    DATA_PTR = 1
    HANDLE = 2
    NULL_PTR = 3


class ApicScalarType(enum.IntEnum):
    """Scalar types of sort, scan and reduction ops (``APICType``)."""

    INT32 = 1
    UINT32 = 2
    INT64 = 3
    UINT64 = 4
    FLOAT32 = 5
    FLOAT64 = 6


class ApicReductionKind(enum.IntEnum):
    """Kinds of the REDUCTION op (``APICReductionKind``, warp/native/apic_types.h)."""

    SUM = 1
    INNER = 2


#: Byte size of each ``APICType``.
APIC_SCALAR_SIZE = {1: 4, 2: 4, 3: 8, 4: 8, 5: 4, 6: 8}


class CudaBinaryKind(enum.IntEnum):
    NONE = 0
    PTX = 1
    CUBIN = 2


class CudaFallbackReason(enum.IntEnum):
    AVAILABLE = 0
    SOURCE_UNAVAILABLE = 1
    EXTERNAL_INCLUDES = 2
    LLVM_CUDA = 3
    LINK_INPUTS = 4
    EXPORT_FAILED = 5
    RECIPE_UNAVAILABLE = 6


__all__ = ["DeviceType", "OpType", "RelocKind", "ApicScalarType", "ApicReductionKind", "APIC_SCALAR_SIZE",
           "CudaBinaryKind", "CudaFallbackReason"]
