"""Variants of real captures on which wrpkit's validator (Python) and wrp-replay's (C++) once disagreed.

Each :class:`Case` edits a capture made at test time (stock ``wp.capture_save``
or ``wrpkit.capture`` with annotations) so that exactly one rule that used to
live on one side only is broken.  Both sides must now refuse it (or, for an
``accept`` case, both must accept it); tests/inspect_validate_check/test_validate.py checks the
Python side through ``wrp validate``, tests/native/test_native_wrpk.py the native side
through ``wrp-replay --list``.  The rule table is schema/VALIDATION-RULES.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import replay_cases as rc
from wrpkit.formats import annotations as ann
from wrpkit import model as m
from wrpkit.module_dirs import modules_dir_for


@dataclass
class Case:
    """One variant.

    Attributes:
        name: Test id.
        program: A program of tests/programs.py.
        annotated: Start from the ``wrpkit.capture`` file (with annotations) instead of the stock one.
        edit: ``edit(program)`` on the decoded model (re-encoded afterwards).
        py: Text the Python refusal must contain.
        native: Text the native refusal must contain.
        raw: ``raw(bytes) -> bytes`` applied after re-encoding.
        modules: ``modules(modules_dir)`` applied to the copied module files.
        accept: Both sides must accept it (a rule one side used to apply wrongly).
        bundle: Check the variant as a ``.wrpk`` (``wrp convert``) instead of a ``.wrp``.
        legacy: Start from a committed capture of an older Warp instead,
            ``"<release>/<case>"`` under tests/fixtures/legacy/ (``program`` is then unused).
        direct_bundle: Encode the edited model straight to a ``.wrpk``: for what a bundle can
            say but the program's own WRP1 format cannot (the edit would not survive a ``.wrp``).
        raw_bundle: ``raw_bundle(bytes) -> bytes`` applied to the ``.wrpk`` (with ``bundle``); the
            manifest's SHA-256 in the header is re-stamped afterwards.
    """

    name: str
    program: str
    edit: Callable
    py: str = ""
    native: str = ""
    annotated: bool = False
    raw: Optional[Callable] = None
    modules: Optional[Callable] = None
    accept: bool = False
    bundle: bool = False
    legacy: str = ""
    direct_bundle: bool = False
    raw_bundle: Optional[Callable] = None


def launches(prog, key=None):
    return [op for _, op in m.walk_ops(prog.ops)
            if isinstance(op, m.KernelLaunch) and (key is None or op.kernel_key == key)]


def _grow_values(op, n=8):
    op.value_data = bytes(op.value_data) + bytes(n)


def misplaced_argument(prog):
    op = launches(prog)[0]
    _grow_values(op)
    last = op.params[-1]
    op.params[-1] = last._replace(value_offset=last.value_offset + 8)


def trailing_value_bytes(prog):
    _grow_values(launches(prog)[0])


def align_128(prog):
    op = launches(prog)[0]
    op.params[0] = op.params[0]._replace(value_align=128)


def grad_slot_moved(prog):
    op = launches(prog)[0]
    op.relocations[1] = op.relocations[1]._replace(value_byte_offset=16)


def index_count_past_region(prog):
    op = launches(prog, "k_indexed")[0]
    blob = bytearray(op.value_data)
    struct.pack_into("<i", blob, op.params[0].value_offset + 88, 1000)
    op.value_data = bytes(blob)


def size_not_multiple(prog):
    op = launches(prog)[0]
    op.shape = (3,) + tuple(op.shape[1:])


def backward_without_code(prog):
    op = next(op for op in launches(prog) if not op.is_forward)
    k = next(k for k in prog.kernels if k.kernel_key == op.kernel_key and k.module_hash == op.module_hash)
    k.backward_name = ""


def _indices(prog):
    me = prog.meshes[0]
    return me, next(r for r in prog.regions if r.region_id == me.indices_region_id)


def mesh_index_out_of_range(prog):
    me, reg = _indices(prog)
    data = bytearray(reg.data)
    struct.pack_into("<i", data, 0, me.num_points)
    reg.data = bytes(data)


def mesh_field(**fields):
    def edit(prog):
        prog.meshes[0] = replace(prog.meshes[0], **fields)
    return edit


def mesh_duplicate(prog):
    prog.meshes.append(replace(prog.meshes[0]))


def null_mesh_handle(prog):
    op = next(op for op in launches(prog) if any(r.kind == m.RelocKind.HANDLE for r in op.relocations))
    i = next(i for i, r in enumerate(op.relocations) if r.kind == m.RelocKind.HANDLE)
    op.relocations[i] = op.relocations[i]._replace(region_offset=0)


def _first_array_param(prog):
    for op in launches(prog):
        start = 0
        for p in op.params:
            rels = op.relocations[start:start + p.num_relocs]
            start += p.num_relocs
            if p.value_size == 56 and rels and rels[0].kind == m.RelocKind.DATA_PTR:
                return op, p, rels, start - p.num_relocs
    raise LookupError("no array argument")


def element_past_region(prog):
    """Move an array so that its last element starts inside its region but ends past it: only the
    element size the kernel signature records can tell."""
    op, p, rels, first = _first_array_param(prog)
    ndim = struct.unpack_from("<H", op.value_data, p.value_offset + 48)[0]
    shape = struct.unpack_from("<4i", op.value_data, p.value_offset + 16)[:ndim]
    strides = struct.unpack_from("<4i", op.value_data, p.value_offset + 32)[:ndim]
    hi = sum((d - 1) * s for d, s in zip(shape, strides) if s > 0)
    size = next(r.size for r in prog.regions if r.region_id == rels[0].region_id)
    op.relocations[first] = rels[0]._replace(region_offset=size - hi - 1)


def ndim_mismatch(prog):
    op, p, _, _ = _first_array_param(prog)
    blob = bytearray(op.value_data)
    struct.pack_into("<H", blob, p.value_offset + 48, 2)
    op.value_data = bytes(blob)


def edit_annotations(change):
    def edit(prog):
        a = ann.decode_annotations(prog.annotations)
        prog.annotations = ann.encode_annotations(change(prog, a))
    return edit


def fewer_arguments(prog, a):
    key = (launches(prog)[0].module_hash, launches(prog)[0].kernel_key)
    ks = tuple(replace(k, arguments=k.arguments[:-1]) if (k.module_hash, k.kernel_key) == key else k
               for k in a.kernel_signatures)
    return replace(a, kernel_signatures=ks)


def unknown_kernel_signature(prog, a):
    k = a.kernel_signatures[0]
    return replace(a, kernel_signatures=a.kernel_signatures + (replace(k, kernel_key="not_a_kernel"),))


def view_past_region(prog, a):
    s = a.signature[0]
    return replace(a, signature=(replace(s, byte_offset=1 << 20),) + a.signature[1:])


def corrupt_module(d: Path):
    """One byte appended: still a well-formed ELF object defining every symbol, but not the recorded one."""
    f = sorted(d.iterdir())[0]
    f.write_bytes(f.read_bytes() + b"\0")


def cpu_module_with_digest(prog):
    prog.modules[0].binary_digest = "a" * 64


def ptr_location_missing_region(prog):
    prog.pointer_locations.append(m.PointerLocation(999, 0, 0, 0))


def alloc_past_region(prog):
    r = prog.regions[0]
    prog.ops.append(m.Alloc(r.region_id, r.size + 1))


def empty_scan_missing_region(prog):
    r = prog.regions[0]
    prog.ops.append(m.Scan(999, r.region_id, 0, 0, 0, 0, 0, 1, 5, False))


def bsr_summed_offsets_absent(prog):
    op = next(op for _, op in m.walk_ops(prog.ops) if isinstance(op, m.BsrFromTriplets))
    op.summed_block_offsets_region_id = -1


def module_name(name):
    def edit(prog):
        prog.modules[0].module_name = name
    return edit


def warp_version(prog):
    prog.warp_version = prog.warp_version + " beta"


def short_module_hash(prog):
    new = {mod.module_hash: f"{i:032x}" for i, mod in enumerate(prog.modules)}
    for mod in prog.modules:
        mod.module_hash = new[mod.module_hash]
    for k in prog.kernels:
        k.module_hash = new[k.module_hash]
    for op in launches(prog):
        op.module_hash = new[op.module_hash]


def nesting_65(prog):
    cond = prog.regions[0].region_id
    body = [m.If(cond, 0, [], [])]
    for _ in range(64):
        body = [m.If(cond, 0, body, [])]
    prog.ops = list(prog.ops) + body


def shared_dtype_tables(levels: int = 18) -> bytes:
    """An Annotations buffer of ~840 bytes whose one signature's dtype is a DAG: each level's two
    fields share the level below, so walking every path visits 2^levels tables."""
    import flatbuffers  # noqa: PLC0415

    from wrpkit.formats.fbs import Annotations as A  # noqa: PLC0415
    from wrpkit.formats.fbs import ArraySignature as S  # noqa: PLC0415
    from wrpkit.formats.fbs import DataType as D  # noqa: PLC0415
    from wrpkit.formats.fbs import StructField as F  # noqa: PLC0415

    b = flatbuffers.Builder(1024)
    D.Start(b)
    D.AddSize(b, 4)
    cur = D.End(b)
    for _ in range(levels):
        fields = []
        for _ in range(2):
            F.Start(b)
            F.AddType(b, cur)
            fields.append(F.End(b))
        D.StartFieldsVector(b, 2)
        for f in reversed(fields):
            b.PrependUOffsetTRelative(f)
        vec = b.EndVector()
        D.Start(b)
        D.AddSize(b, 4)
        D.AddFields(b, vec)
        cur = D.End(b)
    name = b.CreateString("a")
    S.Start(b)
    S.AddName(b, name)
    S.AddDtype(b, cur)
    sig = S.End(b)
    A.StartSignatureVector(b, 1)
    b.PrependUOffsetTRelative(sig)
    sigs = b.EndVector()
    A.Start(b)
    A.AddSignature(b, sigs)
    b.Finish(A.End(b), file_identifier=b"WRPK")
    return bytes(b.Output())


def module_no_kernel_uses(prog):
    """A second module record, used by no kernel, whose file is not in <stem>_modules/."""
    extra = replace(prog.modules[0], module_hash="ab" * 32, module_name="unused",
                    binary_filename="wp_unused_abababa.cpu0000.o")
    prog.modules = list(prog.modules) + [extra]


def step_loop(times: int):
    def edit(prog):
        prog.ops = list(prog.ops) * times
    return edit


def _root_vtable(data: bytes) -> tuple:
    """``(manifest offset, root table position, its vtable position)`` in a .wrpk's bytes."""
    moff = struct.unpack_from("<Q", data, 16)[0]
    root = moff + struct.unpack_from("<I", data, moff)[0]
    return moff, root, root - struct.unpack_from("<i", data, root)[0]


def restamp(data: bytes) -> bytes:
    import hashlib  # noqa: PLC0415

    moff, msize = struct.unpack_from("<QQ", data, 16)
    return data[:48] + hashlib.sha256(data[moff:moff + msize]).digest() + data[80:]


def root_table_size(size: int):
    """The Program table's vtable declares ``size`` bytes (its fields lie where they lie)."""
    def raw(data: bytes) -> bytes:
        _, _, vt = _root_vtable(data)
        out = bytearray(data)
        struct.pack_into("<H", out, vt + 2, size)
        return bytes(out)
    return raw


def root_vtable_size(size: int):
    """The Program table's vtable says it is ``size`` bytes long: under 4, it holds no field slot."""
    def raw(data: bytes) -> bytes:
        _, _, vt = _root_vtable(data)
        out = bytearray(data)
        struct.pack_into("<H", out, vt, size)
        return bytes(out)
    return raw


def binding_name(name):
    def edit(prog):
        prog.bindings[0] = m.Binding(name, prog.bindings[0].region_id)
    return edit


def backward_name_nul(prog):
    prog.kernels[0].backward_name = "k_backward\0x"


def warp_version_bell(prog):
    prog.warp_version = "1.19.0\x07"


def bindings_saved_twice(prog):
    """What a second ``capture_save`` of one graph writes: Warp's APIC state keeps every save's names."""
    prog.bindings = list(prog.bindings) + list(prog.bindings)


def binding_renamed_to_another_region(prog):
    """A second save that gave a name another array: Warp's loader keeps the last record's region."""
    first = prog.bindings[0]
    other = next(r.region_id for r in prog.regions if r.region_id != first.region_id)
    prog.bindings = list(prog.bindings) + [m.Binding(first.name, other)]


def annotations_of_shared_tables(prog):
    prog.annotations = shared_dtype_tables()


CASES = [
    # -- annotations whose shared tables make a tiny buffer a 2^18-table walk (Python decoded it
    # -- for minutes; the C++ Verifier's table cap was a fixed 2^20 instead of one per 4 bytes) --
    Case("annotations_of_shared_tables", "views", annotations_of_shared_tables,
         "more tables than it can hold", "failed verification"),
    # -- launch argument packing (was native only) ----------------------------------------------
    Case("launch_argument_misplaced", "views", misplaced_argument, "packed with alignment", "packed with alignment"),
    Case("launch_trailing_value_bytes", "views", trailing_value_bytes, "arguments end at byte",
         "arguments end at byte"),
    Case("launch_grad_slot_moved", "views", grad_slot_moved, "must be followed by its grad pointer",
         "must be followed by its grad pointer"),
    Case("indexedarray_index_count_past_region", "indexedarray", index_count_past_region,
         "index array 0 of 1000 entries", "index array 0 of 1000 entries"),
    Case("launch_size_not_multiple_of_shape", "views", size_not_multiple, "not a multiple of the shape",
         "not a multiple of the shape"),
    Case("backward_launch_without_backward_code", "tape", backward_without_code, "backward launch of kernel",
         "backward launch of kernel"),
    # -- launch argument alignment (was Python only: native allowed up to 256) ------------------
    Case("launch_value_align_128", "views", align_128, "power of two up to 64", "power of two up to 64"),
    # -- meshes (was native only) ----------------------------------------------------------------
    Case("mesh_triangle_index_out_of_range", "mesh", mesh_index_out_of_range, "triangle index 8",
         "triangle index 8"),
    Case("mesh_bvh_constructor_3", "mesh", mesh_field(bvh_constructor=3), "BVH constructor 3", "BVH constructor 3"),
    Case("mesh_bvh_leaf_size_0", "mesh", mesh_field(bvh_leaf_size=0), "leaf size must be at least 1",
         "leaf size must be at least 1"),
    Case("mesh_duplicate_id", "mesh", mesh_duplicate, "appears twice", "appears twice"),
    Case("mesh_triangles_without_points", "mesh", mesh_field(num_points=0), "triangles but no points",
         "triangles but no points"),
    # -- FlatBuffers table shapes (Python refused them, flatbuffers::Verifier in wrp-replay accepts
    # -- them and bounds-checks every field read; both now apply the Verifier's rules) -----------
    Case("bundle_table_size_below_its_fields", "views", lambda prog: None, accept=True, bundle=True,
         raw_bundle=root_table_size(4)),
    Case("bundle_table_size_past_the_manifest", "views", lambda prog: None, accept=True, bundle=True,
         raw_bundle=root_table_size(0xFFF0)),
    # A vtable under 4 bytes: a Program with every field absent, refused by both for what it lacks.
    Case("bundle_vtable_under_4_bytes", "views", lambda prog: None, "producer Warp version", "blob", bundle=True,
         raw_bundle=root_vtable_size(2)),
    # -- strings of a bundle (Python checked only UTF-8; the WRP1 rules ran only on a .wrp, so a
    # -- bundle passed `wrp validate`, failed `wrp-replay --list`, and converted to a refused .wrp) --
    Case("bundle_binding_name_with_nul", "views", binding_name("x\0y"), "NUL byte", "NUL byte",
         direct_bundle=True),
    Case("bundle_backward_name_with_nul", "views", backward_name_nul, "NUL byte", "NUL byte", direct_bundle=True),
    Case("bundle_warp_version_not_printable", "views", warp_version_bell, "printable ASCII", "printable ASCII",
         direct_bundle=True),
    # -- repeated binding names (both refused them; stock Warp loads and replays them, the last
    # -- record of a name winning): warnings on both sides -------------------------------------
    Case("bindings_saved_twice", "views", bindings_saved_twice, accept=True),
    Case("binding_renamed_to_another_region", "views", binding_renamed_to_another_region, accept=True),
    # -- a null mesh handle (Python refused it, native and Warp accept it) -----------------------
    Case("null_mesh_handle", "mesh", null_mesh_handle, accept=True),
    # -- which module files must be present (Python wanted every file named; native and Warp
    # -- need only the binaries the kernels are in) ----------------------------------------------
    Case("module_file_no_kernel_uses_is_missing", "views", module_no_kernel_uses, accept=True),
    # -- kernel signatures of the annotations (was Python only) ----------------------------------
    Case("signature_element_past_region", "views", element_past_region, "past the bounds of region",
         "spans past the end of region", annotated=True),
    Case("signature_ndim_mismatch", "views", ndim_mismatch, "the kernel declares 1", "the kernel declares 1",
         annotated=True),
    Case("signature_argument_count", "views", edit_annotations(fewer_arguments), "arguments; kernel",
         "arguments; kernel", annotated=True),
    Case("signature_of_unknown_kernel", "views", edit_annotations(unknown_kernel_signature),
         "'not_a_kernel' of module", "\"not_a_kernel\" of module", annotated=True),
    # -- binding signatures and module digests of the annotations (was native only) --------------
    Case("binding_signature_past_region", "views", edit_annotations(view_past_region), "outside region",
         "outside region", annotated=True),
    Case("module_digest_mismatch", "views", lambda prog: None, "does not match the SHA-256",
         "does not match the", annotated=True, modules=corrupt_module),
    # -- metadata (was native only) --------------------------------------------------------------
    Case("cpu_module_with_cuda_metadata", "views", cpu_module_with_digest, "CUDA artifact metadata",
         "CUDA artifact metadata"),
    Case("pointer_location_of_missing_region", "views", ptr_location_missing_region,
         "pointer-location region 999 does not exist", "pointer-location region 999 does not exist"),
    Case("nul_in_module_name", "views", module_name("main\0x"), "NUL byte", "NUL byte"),
    Case("warp_version_not_printable", "views", warp_version, "printable ASCII", "printable ASCII"),
    # -- module hashes (Python wanted 64 hex characters, native any lowercase hex) ---------------
    Case("module_hash_not_sha256", "views", short_module_hash, "64 lowercase hex", "64 lowercase hex"),
    # -- UTF-8 (Python refused invalid UTF-8, native did not check) -----------------------------
    Case("module_name_not_utf8", "views", module_name("ZZQQmain"), "UTF-8", "UTF-8",
         raw=lambda data: data.replace(b"ZZQQ", b"\xff\xfeQQ", 1)),
    # -- ops (was native only) -------------------------------------------------------------------
    Case("alloc_past_region", "views", alloc_past_region, "ALLOC: bytes", "exceed the region's"),
    Case("empty_scan_of_missing_region", "views", empty_scan_missing_region, "region 999 does not exist",
         "999 does not exist"),
    Case("bsr_summed_block_offsets_absent", "bsr", bsr_summed_offsets_absent, "summed_block_offsets: region -1",
         "summed_block_offsets_region_id -1"),
    Case("conditional_nesting_65", "views", nesting_65, "nesting deeper than 64", "nest deeper than 64"),
    # -- bundles (wrp-replay's Verifier counted each use of a shared op table against a quarter of the
    #    manifest's size, so it refused wrpkit's own bundle of a long step loop) -------------------
    Case("bundle_of_a_long_step_loop", "views", step_loop(1500), accept=True, bundle=True),
]


# -- captures of older Warp releases (formats 3, 10, 14-16): each format's own rules ------------------------------
#
# Both validators read every released format (the C++ one from native/src/wrp1_layouts.h, generated from
# wrpkit/formats/wrp1_layout.py).  Each case below breaks one rule of one format in a committed capture of
# tests/fixtures/legacy/, or breaks nothing that format forbids (accept).  Raw edits work on the bytes the
# model re-encodes, which are the fixture's own (the codec round-trips every format byte for byte).

LEGACY_ROOT = Path(__file__).resolve().parent / "fixtures" / "legacy"
_U32 = struct.Struct("<I")
_OPS_ENTRY = 64 + 2 * 32  # the OPERATIONS entry of the section table (the third)


def _no_edit(prog):
    return None


def _first_op_at(data: bytes) -> int:
    from wrpkit.formats.wrp1 import decode_wrp1  # noqa: PLC0415

    return decode_wrp1(data).ops[0].at


def truncated_launch(data: bytes) -> bytes:
    """Cut the last 4 bytes of the first op (a launch) and shrink its total_size and the OPERATIONS section to
    match: the record no longer holds what its fields describe (value bytes, or format 3's last descriptor)."""
    at = _first_op_at(data)
    total = _U32.unpack_from(data, at + 4)[0]
    out = bytearray(data[:at + total - 4] + data[at + total:])
    _U32.pack_into(out, at + 4, total - 4)
    for field in (16, 24):  # size, uncompressed_size (u64)
        at_field = _OPS_ENTRY + field
        struct.pack_into("<Q", out, at_field, struct.unpack_from("<Q", out, at_field)[0] - 4)
    return bytes(out)


def set_u32(value: int, *offsets: int, first_op: bool = False):
    """Write ``value`` as a u32 at each file offset (and, with ``first_op``, over the first op's type)."""
    def raw(data: bytes) -> bytes:
        out = bytearray(data)
        for at in offsets + ((_first_op_at(data),) if first_op else ()):
            _U32.pack_into(out, at, value)
        return bytes(out)
    return raw


def first_op_type(t: int):
    return set_u32(t, first_op=True)


def relabel_format(version: int):
    """The header's and the metadata's format version (the records stay as they are); METADATA starts at
    byte 160 in every format."""
    return set_u32(version, 4, 160)


def metadata_version(version: int):
    return set_u32(version, 160)


def first_op_byte(offset: int, value: int):
    """Set byte ``offset`` of the first op record (from its op header)."""
    def raw(data: bytes) -> bytes:
        out = bytearray(data)
        out[_first_op_at(data) + offset] = value
        return bytes(out)
    return raw


def add_to_first_op_u16(offset: int, delta: int):
    def raw(data: bytes) -> bytes:
        out = bytearray(data)
        at = _first_op_at(data) + offset
        struct.pack_into("<H", out, at, struct.unpack_from("<H", out, at)[0] + delta)
        return bytes(out)
    return raw


def if_branch_a_longer(data: bytes) -> bytes:
    from wrpkit.formats.wrp1 import decode_wrp1  # noqa: PLC0415

    out = bytearray(data)
    at = next(op.at for op in decode_wrp1(data).ops if isinstance(op, m.If))
    _U32.pack_into(out, at + 24, _U32.unpack_from(out, at + 24)[0] + 4)
    return bytes(out)


def legacy_arg_pad(data: bytes) -> bytes:
    """A nonzero reserved byte (+84) in the first 88-byte argument descriptor of a format-3 launch."""
    at = _first_op_at(data)
    key_len, hash_len = struct.unpack_from("<HH", data, at + 60)
    out = bytearray(data)
    out[at + 68 + key_len + hash_len + 84] = 1
    return bytes(out)


def legacy_arg(j: int, **fields):
    def edit(prog):
        op = launches(prog)[0]
        op.legacy_args[j] = op.legacy_args[j]._replace(**fields)
    return edit


def legacy_arg_shape(j: int, extent: int):
    def edit(prog):
        op = launches(prog)[0]
        a = op.legacy_args[j]
        op.legacy_args[j] = a._replace(shape=(extent,) + tuple(a.shape[1:]))
    return edit


def second_record_of_a_key(prog):
    """Formats 3 and 10 key kernel records by key alone: add module b's record of the collided key."""
    k = prog.kernels[0]
    other = next(mod for mod in prog.modules if mod.module_hash != k.module_hash)
    prog.kernels = list(prog.kernels) + [replace(k, module_hash=other.module_hash)]


def negative_extent(prog):
    op = launches(prog)[0]
    op.shape = (-op.shape[0],) + tuple(op.shape[1:])


def producer_version(prog):
    prog.warp_version = "1.18.0"


def counted_pointer_location(prog):
    prog.pointer_locations = [m.PointerLocation(prog.regions[0].region_id, 0, 0, 1)]


def launch_grid_stride(prog):
    launches(prog)[0].grid_stride = 1


def module_digest(prog):
    prog.modules[0] = replace(prog.modules[0], binary_digest="ab" * 32)


def as_format(version: int):
    def edit(prog):
        prog.format_version = version
    return edit


def transpose_tail(prog):
    op = next(op for op in prog.ops if isinstance(op, m.BsrTranspose))
    op.padded_tail = tuple(range(op.col_count + 1))


def descriptors_and_value_data(prog):
    launches(prog)[0].value_data = bytes(8)


LEGACY_CASES = [
    # -- structure, per format ---------------------------------------------------------------------------------------
    Case("legacy_f10_truncated_launch", "", _no_edit, "record size", "but its fields describe",
         legacy="1.14.0/saxpy", raw=truncated_launch),
    Case("legacy_f3_truncated_launch", "", _no_edit, "argument descriptors and 0 handle offsets need",
         "argument descriptors", legacy="1.13.0/saxpy", raw=truncated_launch),
    Case("legacy_f16_truncated_launch", "", _no_edit, "record size", "but its fields describe",
         legacy="1.18.0/saxpy", raw=truncated_launch),
    Case("legacy_f10_scan_op_type", "", _no_edit, "SCAN, which format 10 does not have",
         "SCAN, which format 10 does not have", legacy="1.14.0/saxpy", raw=first_op_type(9)),
    Case("legacy_f3_if_op_type", "", _no_edit, "IF, which format 3 does not have", "IF, which format 3 does not have",
         legacy="1.13.0/saxpy", raw=first_op_type(7)),
    Case("legacy_f14_reduction_op_type", "", _no_edit, "REDUCTION, which format 14 does not have",
         "REDUCTION, which format 14 does not have", legacy="1.15.0/scan", raw=first_op_type(16)),
    Case("legacy_scan_relabelled_format_10", "", _no_edit, "SCAN, which format 10 does not have",
         "SCAN, which format 10 does not have", legacy="1.15.0/scan", raw=relabel_format(10)),
    Case("legacy_metadata_version_differs", "", _no_edit, "differs from the header's", "differs from the header's",
         legacy="1.16.0/saxpy", raw=metadata_version(14)),
    Case("legacy_f10_if_branch_length", "", _no_edit, "do not add up", "branch sizes", legacy="1.14.0/capture_if",
         raw=if_branch_a_longer),
    Case("legacy_f3_kernel_key_length", "", _no_edit, "record size", "but its fields describe",
         legacy="1.13.0/struct", raw=add_to_first_op_u16(60, 1)),
    # byte +57 of a launch is reserved in formats 3 and 10 and part of grid_stride from 13 on
    Case("legacy_f10_launch_pad1", "", _no_edit, "_pad1", "_pad1", legacy="1.14.0/saxpy", raw=first_op_byte(57, 1)),
    Case("legacy_f3_launch_pad1", "", _no_edit, "_pad1", "_pad1", legacy="1.13.0/saxpy", raw=first_op_byte(58, 1)),
    Case("legacy_f16_byte_57_is_grid_stride", "", _no_edit, accept=True, legacy="1.18.0/saxpy",
         raw=first_op_byte(57, 1)),
    Case("legacy_f10_launch_pad2", "", _no_edit, "_pad2", "_pad2", legacy="1.14.0/struct", raw=first_op_byte(66, 1)),
    Case("legacy_f3_descriptor_pad", "", _no_edit, "reserved bytes must be zero", "legacy_args._pad",
         legacy="1.13.0/saxpy", raw=legacy_arg_pad),
    Case("legacy_f3_backward_launch", "", _no_edit, "backward", "backward", legacy="1.13.0/saxpy",
         raw=first_op_byte(56, 0)),
    # -- format 3's argument descriptors -------------------------------------------------------------------------------
    Case("legacy_f3_scalar_too_large", "", legacy_arg(0, byte_offset=65), "scalar size 65 is outside 1..64",
         "scalar size 65 is outside 1..64", legacy="1.13.0/saxpy"),
    Case("legacy_f3_scalar_too_large_bundle", "", legacy_arg(0, byte_offset=65), "scalar size 65 is outside 1..64",
         "scalar size 65 is outside 1..64", legacy="1.13.0/saxpy", bundle=True),
    Case("legacy_f3_duplicate_param_index", "", legacy_arg(1, param_index=1), "argument indices", "param_index",
         legacy="1.13.0/saxpy"),
    Case("legacy_f3_array_past_region", "", legacy_arg_shape(1, 33), "array reaches bytes", "array reaches bytes",
         legacy="1.13.0/saxpy"),
    Case("legacy_f3_array_past_region_bundle", "", legacy_arg_shape(1, 33), "array reaches bytes",
         "array reaches bytes", legacy="1.13.0/saxpy", bundle=True),
    Case("legacy_f3_array_of_missing_region", "", legacy_arg(1, region_id=99), "which does not exist",
         "region 99 does not exist", legacy="1.13.0/struct"),
    # -- kernel records keyed by key alone (formats 3, 10) ---------------------------------------------------------------
    Case("legacy_f10_key_recorded_twice", "", second_record_of_a_key, "is recorded twice", "is recorded twice",
         legacy="1.14.0/collision"),
    Case("legacy_f3_key_recorded_twice", "", second_record_of_a_key, "is recorded twice", "is recorded twice",
         legacy="1.13.0/collision"),
    Case("legacy_f10_collision_bundle", "", _no_edit, accept=True, legacy="1.14.0/collision", bundle=True),
    # -- int32 launch extents before format 16 ----------------------------------------------------------------------------
    Case("legacy_f15_negative_extent", "", negative_extent, "is negative", "is negative", legacy="1.16.0/saxpy"),
    # -- what a bundle can say but the program's format cannot hold -----------------------------------------------------
    Case("legacy_f16_bundle_producer_version", "", producer_version, "records no producer version",
         "records no producer version", legacy="1.18.0/saxpy", direct_bundle=True),
    Case("legacy_f14_bundle_pointer_location_count", "", counted_pointer_location, "record no slot count",
         "record no slot count", legacy="1.15.0/saxpy", direct_bundle=True),
    Case("legacy_f10_bundle_grid_stride", "", launch_grid_stride, "records no grid_stride",
         "records no grid_stride", legacy="1.14.0/saxpy", direct_bundle=True),
    Case("legacy_f16_bundle_module_digest", "", module_digest, "module records carry no binary digest",
         "module records carry no binary digest", legacy="1.18.0/saxpy", direct_bundle=True),
    Case("legacy_bundle_scan_in_format_10", "", as_format(10), "SCAN, which format 10 does not have",
         "SCAN, which format 10 does not have", legacy="1.15.0/scan", direct_bundle=True),
    Case("legacy_f3_bundle_descriptors_and_value_data", "", descriptors_and_value_data,
         "has no params, relocations or value data", "has no params, relocations or value data",
         legacy="1.13.0/saxpy", direct_bundle=True),
    Case("legacy_f14_bundle_as_is", "", _no_edit, accept=True, legacy="1.15.0/struct_array", direct_bundle=True),
    # -- BSR_TRANSPOSE's capacity tail: never in format 13, always for a padded destination from 14 --------------------
    Case("legacy_f13_padded_transpose_relabelled_14", "", _no_edit, "record carries 0 capacity offsets",
         "capacity offsets of a padded destination", legacy="format13/bsr_transpose", raw=relabel_format(14)),
    Case("legacy_f13_bundle_transpose_tail", "", transpose_tail, "record carries", "has no tail in format 13",
         legacy="format13/bsr_transpose", direct_bundle=True),
]
CASES += LEGACY_CASES

CASE_IDS = [c.name for c in CASES]


def base_capture(case: Case) -> Path:
    if case.legacy:
        return LEGACY_ROOT / f"{case.legacy}.wrp"
    return rc.wrpkit_capture(case.program) if case.annotated else rc.stock_capture(case.program)


def build(case: Case, dst_dir: Path) -> Path:
    """Write the case's variant (``.wrp`` and ``<stem>_modules/``, or a ``.wrpk``) into ``dst_dir``."""
    if case.direct_bundle:
        from wrpkit.formats import wrp1  # noqa: PLC0415
        from wrpkit.formats.wrpk import builder  # noqa: PLC0415

        src = base_capture(case)
        prog = wrp1.decode_wrp1(src.read_bytes())
        case.edit(prog)
        mdir = modules_dir_for(src)
        files = {f.name: f.read_bytes() for f in mdir.iterdir()} if mdir.is_dir() else {}
        dst_dir.mkdir(parents=True, exist_ok=True)
        path = dst_dir / f"{src.stem}.wrpk"
        path.write_bytes(builder.encode_wrpk(prog, files))
        return path
    path = rc.rewrite_capture(base_capture(case), dst_dir, case.edit)
    if case.raw is not None:
        path.write_bytes(case.raw(path.read_bytes()))
    if case.modules is not None:
        case.modules(modules_dir_for(path))
    if case.bundle:
        from wrpkit.formats.convert import convert  # noqa: PLC0415

        bundled = path.with_suffix(".wrpk")
        convert(path, bundled)
        if case.raw_bundle is not None:
            bundled.write_bytes(restamp(case.raw_bundle(bundled.read_bytes())))
        return bundled
    return path


def python_validate(path: Path):
    """``wrp validate PATH`` through click's CliRunner: ``(exit code, output)``."""
    from click.testing import CliRunner  # noqa: PLC0415

    from wrpkit.cli import main  # noqa: PLC0415

    res = CliRunner().invoke(main, ["validate", str(path)])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, " ".join(res.output.split())  # undo the console's line wrapping
