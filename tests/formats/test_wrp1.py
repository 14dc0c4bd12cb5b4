"""The WRP1 codec on real Warp captures: lossless round trips, counts, rejection of bad bytes."""

from __future__ import annotations

import struct

import pytest

import programs
from wrpkit import model as m
from wrpkit.errors import WrpFormatError, WrpVersionError
from wrpkit.formats.wrp1 import decode_wrp1, encode_wrp1, iter_wrp1_chunks

NAMES = sorted(programs.PROGRAMS)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_is_byte_identical(captures, name):
    data = captures[name].read_bytes()
    prog = decode_wrp1(data)
    assert encode_wrp1(prog) == data
    # The chunked encoder yields the same bytes and passes region data through uncopied.
    assert b"".join(bytes(c) for c in iter_wrp1_chunks(prog)) == data


@pytest.mark.parametrize("name", NAMES)
def test_op_counts_match_what_the_program_issued(captures, name):
    prog = decode_wrp1(captures[name].read_bytes())
    assert prog.op_counts() == {k: v for k, v in sorted(programs.PROGRAMS[name].op_counts.items(),
                                                         key=lambda kv: m.OpType[kv[0]]) if v}


@pytest.mark.parametrize("name", NAMES)
def test_metadata_is_decoded(captures, name):
    prog = decode_wrp1(captures[name].read_bytes())
    spec = programs.PROGRAMS[name]
    assert prog.format_version == 18
    assert prog.device_type == m.DeviceType.CPU and prog.target_arch == 0
    import warp  # noqa: PLC0415

    assert prog.warp_version == warp.config.version
    assert [b.name for b in prog.bindings] == spec.inputs + spec.outputs
    region_ids = {r.region_id for r in prog.regions}
    assert all(b.region_id in region_ids for b in prog.bindings)
    if spec.kernels:
        launched = {op.kernel_key for _, op in m.walk_ops(prog.ops) if isinstance(op, m.KernelLaunch)}
        assert spec.kernels <= launched


def test_decoding_does_not_copy_region_data(captures):
    data = captures[NAMES[0]].read_bytes()
    prog = decode_wrp1(data)
    for r in prog.regions:
        if r.has_initial_data:
            assert isinstance(r.data, memoryview) and r.data.obj is data


@pytest.mark.parametrize("name", NAMES)
def test_shared_decode_gives_one_object_per_distinct_record(captures, name):
    """share_ops=True: equal programs, repeats are one object, and the encoding is unchanged."""
    data = captures[name].read_bytes()
    plain = decode_wrp1(data)
    shared = decode_wrp1(data, share_ops=True)
    assert shared == plain
    assert encode_wrp1(shared) == data
    leaf = [(i, op) for i, op in m.walk_ops(shared.ops) if not isinstance(op, (m.If, m.While))]
    records = set()
    for _, op in m.walk_ops(plain.ops):
        if not isinstance(op, (m.If, m.While)):
            total = struct.unpack_from("<I", data, op.at + 4)[0]
            records.add(data[op.at:op.at + total])
    # As many distinct objects as distinct records, however often each repeats.
    assert len({id(op) for _, op in leaf}) == len(records)


def test_shared_decode_shares_a_step_loops_launches(tmp_path):
    """49 launches cycling through 7 argument values decode into 7 objects (plus the one other launch)."""
    path = tmp_path / "loop.wrp"
    programs.capture_to_file(programs.make_big(launches=50, region_bytes=4096), path)
    data = path.read_bytes()
    prog = decode_wrp1(data, share_ops=True)
    launches = [op for _, op in m.walk_ops(prog.ops) if isinstance(op, m.KernelLaunch)]
    assert len(launches) == 50
    assert len({id(op) for op in launches}) == 8
    assert prog == decode_wrp1(data) and encode_wrp1(prog) == data


def test_on_regions_sees_the_regions_before_the_ops(captures):
    data = captures[NAMES[0]].read_bytes()
    seen = []
    prog = decode_wrp1(data, on_regions=lambda regions: seen.append(list(regions)))
    assert seen == [prog.regions] and prog.regions
    # Called before the operations are decoded: a bad first op does not stop it.
    bad = bytearray(data)
    first_op = prog.ops[0].at
    bad[first_op:first_op + 4] = struct.pack("<I", 0xFFFF)
    seen.clear()
    with pytest.raises(WrpFormatError, match="op type 65535"):
        decode_wrp1(bytes(bad), on_regions=lambda regions: seen.append(list(regions)))
    assert seen == [prog.regions]


def test_every_cpu_op_type_is_covered(captures):
    seen = set()
    for path in captures.values():
        seen |= set(decode_wrp1(path.read_bytes()).op_counts())
    # Every op type stock Warp 1.19 writes on CPU (see schema/WRP1-FORMAT.md).
    assert seen >= {"KERNEL_LAUNCH", "MEMCPY_D2D", "MEMSET", "IF", "WHILE", "SCAN", "MEMTILE", "SEGMENTED_SORT",
                    "RADIX_SORT", "RUNLENGTH_ENCODE", "BSR_FROM_TRIPLETS", "BSR_TRANSPOSE", "REDUCTION"}


def test_adjoint_launches_keep_their_adjoint_bindings(captures):
    prog = decode_wrp1(captures["tape"].read_bytes())
    back = [op for _, op in m.walk_ops(prog.ops) if isinstance(op, m.KernelLaunch) and not op.is_forward]
    assert back and all(len(op.adjoint_params) == len(op.params) for op in back)


def test_truncation_anywhere_is_rejected(small_capture):
    data = small_capture.read_bytes()
    cuts = sorted(set(list(range(0, 200)) + list(range(200, len(data), max(1, len(data) // 300)))))
    for n in cuts:
        with pytest.raises(WrpFormatError):
            decode_wrp1(data[:n])


def test_trailing_bytes_are_rejected(small_capture):
    with pytest.raises(WrpFormatError, match="follow the last section"):
        decode_wrp1(small_capture.read_bytes() + b"xyz")


def test_bit_flips_never_escape_as_other_exceptions(small_capture):
    data = small_capture.read_bytes()
    rejected = 0
    for pos in range(0, len(data), max(1, len(data) // 600)):
        for bit in (0, 7):
            bad = bytearray(data)
            bad[pos] ^= 1 << bit
            try:
                prog = decode_wrp1(bytes(bad))
            except WrpFormatError:
                rejected += 1
                continue
            # Accepted flips must still round-trip exactly (they changed a value, not the layout).
            assert encode_wrp1(prog) == bytes(bad)
    assert rejected > 0


def test_errors_name_field_and_offset(small_capture):
    data = bytearray(small_capture.read_bytes())
    struct.pack_into("<I", data, 4, 17)
    with pytest.raises(WrpVersionError) as e:
        decode_wrp1(bytes(data))
    assert "header.version" in str(e.value) and "byte 4" in str(e.value)
    assert e.value.hint


def test_huge_lengths_are_rejected_before_allocation(small_capture):
    data = bytearray(small_capture.read_bytes())
    meta_off = struct.unpack_from("<Q", data, 64 + 8)[0]
    for value in (2**31, 2**32 - 1):
        bad = bytearray(data)
        struct.pack_into("<I", bad, meta_off + 4, value)  # warp_version string length
        with pytest.raises(WrpFormatError, match="limit"):
            decode_wrp1(bytes(bad))
    bad = bytearray(data)
    struct.pack_into("<Q", bad, 64 + 16, 2**63)  # METADATA section size
    with pytest.raises(WrpFormatError, match="does not fit"):
        decode_wrp1(bytes(bad))


def test_unknown_and_reserved_op_types_are_rejected(small_capture):
    data = bytearray(small_capture.read_bytes())
    ops_off = struct.unpack_from("<Q", data, 64 + 2 * 32 + 8)[0]
    for t in (3, 20, 0, 2**31):
        bad = bytearray(data)
        struct.pack_into("<I", bad, ops_off + 4, t)
        with pytest.raises(WrpFormatError, match="op type"):
            decode_wrp1(bytes(bad))


def test_op_total_size_lies_are_rejected(small_capture):
    data = bytearray(small_capture.read_bytes())
    ops_off = struct.unpack_from("<Q", data, 64 + 2 * 32 + 8)[0]
    total = struct.unpack_from("<I", data, ops_off + 8)[0]
    for lie in (0, 7, total - 1, total + 1, 2**32 - 1):
        bad = bytearray(data)
        struct.pack_into("<I", bad, ops_off + 8, lie)
        with pytest.raises(WrpFormatError):
            decode_wrp1(bytes(bad))
