"""Hand-built .wrpk bundles for hostile-input tests (FlatBuffers builder, slot numbers of schema/wrp.fbs).

Shared by tests/native/test_native_*.py and tests/reliability/test_fuzz_native.py.
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


def misaligned_annotations(binding: str, count: int = 16) -> bytes:
    """An Annotations FlatBuffer (identifier "WRPK") typing ``binding`` as float32[count], whose int64
    shape and strides vectors sit at addresses 4 mod 8.

    Built normally, then shifted by 4 bytes after its 8-byte header: every offset in a FlatBuffer is
    relative except the root's, so the buffer stays valid for flatbuffers::Verifier (which checks only
    4-byte alignment of a vector's length), but its 8-byte elements are misaligned.  No 8-byte scalar
    field is written (byte_offset is left at its default), so nothing else is.
    """
    import flatbuffers  # noqa: PLC0415

    b = flatbuffers.Builder(256)
    dname = b.CreateString("float32")
    b.StartObject(5)  # DataType: name, scalar, shape, size, fields
    b.PrependUOffsetTRelativeSlot(0, dname, 0)
    b.PrependUint8Slot(1, 11, 0)  # FLOAT32
    b.PrependUint32Slot(3, 4, 0)
    dtype = b.EndObject()
    vectors = []
    for value in (count, 4):  # shape, strides
        b.StartVector(8, 1, 8)
        b.PrependInt64(value)
        vectors.append(b.EndVector())
    name = b.CreateString(binding)
    b.StartObject(7)  # ArraySignature: name, dtype, shape, strides, byte_offset, is_input, is_output
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependUOffsetTRelativeSlot(1, dtype, 0)
    b.PrependUOffsetTRelativeSlot(2, vectors[0], 0)
    b.PrependUOffsetTRelativeSlot(3, vectors[1], 0)
    b.PrependBoolSlot(5, True, False)
    sig = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(sig)
    sigs = b.EndVector()
    b.StartObject(4)  # Annotations: producer, signature, kernel_signatures, module_digests
    b.PrependUOffsetTRelativeSlot(1, sigs, 0)
    b.Finish(b.EndObject(), b"WRPK")
    buf = bytes(b.Output())
    root = struct.unpack_from("<I", buf, 0)[0]
    return struct.pack("<I", root + 4) + buf[4:8] + bytes(4) + buf[8:]


def with_annotations(wrp: bytes, payload: bytes) -> bytes:
    """Append an ANNOTATIONS section ("WRPA") holding ``payload`` to a 3-section .wrp."""
    n = struct.unpack_from("<I", wrp, 12)[0]
    assert n == 3
    out = bytearray(wrp[:64])
    struct.pack_into("<I", out, 12, 4)
    for i in range(3):
        t, fl, off, size, raw = struct.unpack_from("<IIQQQ", wrp, 64 + 32 * i)
        out += struct.pack("<IIQQQ", t, fl, off + 32, size, raw)
    out += struct.pack("<IIQQQ", 0x41505257, 0, len(wrp) + 32, len(payload), len(payload))
    return bytes(out) + wrp[160:] + payload
