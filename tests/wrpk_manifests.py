"""Hand-built .wrpk bundles for hostile-input tests (FlatBuffers builder, slot numbers of schema/wrp.fbs).

Shared by tests/test_native_*.py and tests/test_fuzz_native.py.
"""

from __future__ import annotations

import hashlib
import struct


def wrap_manifest(manifest: bytes, blob_area: bytes = b"") -> bytes:
    """A .wrpk around ``manifest`` (header fields and checksum right) followed by ``blob_area``."""
    manifest = manifest + bytes(-len(manifest) % 8)
    boff = (128 + len(manifest) + 63) // 64 * 64
    header = struct.pack("<8sIIQQQQ32s48s", b"WRPK\r\n\x1a\n", 1, 0, 128, len(manifest), boff, len(blob_area),
                         hashlib.sha256(manifest).digest(), bytes(48))
    return header + manifest + bytes(boff - 128 - len(manifest)) + blob_area


def program_manifest(ops=None, regions=None, op_count=1, edit_op=None) -> bytes:
    """A minimal Program manifest (FlatBuffers builder, slot numbers of schema/wrp.fbs)."""
    import flatbuffers  # noqa: PLC0415

    b = flatbuffers.Builder(1024)
    region_offsets = []
    for build in regions or []:
        region_offsets.append(build(b))
    op_offsets = []
    for build in ops or []:
        op_offsets.append(build(b))
    ops_vec = regions_vec = None
    if op_offsets:
        b.StartVector(4, len(op_offsets) * op_count, 4)
        for o in reversed(op_offsets * op_count):
            b.PrependUOffsetTRelative(o)
        ops_vec = b.EndVector()
    if region_offsets:
        b.StartVector(4, len(region_offsets), 4)
        for o in reversed(region_offsets):
            b.PrependUOffsetTRelative(o)
        regions_vec = b.EndVector()
    version = b.CreateString("1.19.0")
    b.StartObject(12)
    b.PrependUOffsetTRelativeSlot(1, version, 0)
    if regions_vec:
        b.PrependUOffsetTRelativeSlot(9, regions_vec, 0)
    if ops_vec:
        b.PrependUOffsetTRelativeSlot(10, ops_vec, 0)
    b.Finish(b.EndObject(), b"WRPK")
    return bytes(b.Output())


def shared_launch(b):
    """One 64 KiB KERNEL_LAUNCH operation (for tables referenced many times)."""
    value = b.CreateByteVector(bytes(65536))
    key, mh = b.CreateString("k"), b.CreateString("0" * 64)
    b.StartVector(4, 4, 4)
    for v in (1, 0, 0, 0):
        b.PrependUint32(v)
    shape = b.EndVector()
    b.StartObject(16)
    b.PrependUOffsetTRelativeSlot(0, shape, 0)
    b.PrependUOffsetTRelativeSlot(10, key, 0)
    b.PrependUOffsetTRelativeSlot(11, mh, 0)
    b.PrependUOffsetTRelativeSlot(15, value, 0)
    launch = b.EndObject()
    b.StartObject(2)
    b.PrependUint8Slot(0, 1, 0)
    b.PrependUOffsetTRelativeSlot(1, launch, 0)
    return b.EndObject()


def shared_if_bodies(n_ifs: int, body_len: int) -> bytes:
    """A .wrpk whose ``n_ifs`` IF ops all share one body of ``body_len`` references to one MEMSET.

    Each IF walks the whole body again, so ``n_ifs * body_len`` entries are
    walked in a manifest of about ``4 * body_len + 40 * n_ifs`` bytes.
    """
    import flatbuffers  # noqa: PLC0415

    b = flatbuffers.Builder(1 << 16)
    b.StartObject(4)  # Memset: region_id, value, offset, size
    b.PrependInt32Slot(0, 1, 0)
    b.PrependUint64Slot(3, 4, 0)
    memset = b.EndObject()
    b.StartObject(2)  # Operation: op_type (5 = Memset), op
    b.PrependUint8Slot(0, 5, 0)
    b.PrependUOffsetTRelativeSlot(1, memset, 0)
    op = b.EndObject()
    b.StartVector(4, body_len, 4)
    for _ in range(body_len):
        b.PrependUOffsetTRelative(op)
    body = b.EndVector()
    ifs = []
    for i in range(n_ifs):
        b.StartObject(4)  # If: cond_region_id, cond_offset, then_ops, else_ops
        b.PrependInt32Slot(0, 1, 0)
        b.PrependUint64Slot(1, 4 * i, 0)
        b.PrependUOffsetTRelativeSlot(2, body, 0)
        table = b.EndObject()
        b.StartObject(2)  # Operation: op_type (7 = If), op
        b.PrependUint8Slot(0, 7, 0)
        b.PrependUOffsetTRelativeSlot(1, table, 0)
        ifs.append(b.EndObject())
    b.StartVector(4, n_ifs, 4)
    for o in reversed(ifs):
        b.PrependUOffsetTRelative(o)
    ops = b.EndVector()
    version = b.CreateString("1.19.0")
    b.StartObject(12)  # Program: format_version, warp_version, device_type (1 = CPU), ..., ops (slot 10)
    b.PrependUint32Slot(0, 18, 0)
    b.PrependUOffsetTRelativeSlot(1, version, 0)
    b.PrependUint8Slot(2, 1, 0)
    b.PrependUOffsetTRelativeSlot(10, ops, 0)
    b.Finish(b.EndObject(), b"WRPK")
    return wrap_manifest(bytes(b.Output()))
