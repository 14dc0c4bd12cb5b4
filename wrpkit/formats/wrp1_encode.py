"""The WRP1 encoder's section writers and their sizes, computed without building them.

:func:`wrpkit.formats.wrp1.iter_wrp1_chunks` frames what these write (header,
section table); each format's records come out as
:class:`~wrpkit.formats.wrp1_layout.FormatLayout` says, byte-identical to
what :mod:`wrpkit.formats.wrp1_decode` read.  Content a format cannot hold is
refused, never dropped.
"""

from __future__ import annotations

import struct
from typing import Iterator

from .. import model as m
from ..errors import WrpFormatError
from ..apic_types import OpType
from .wrp1_layout import CURRENT_FORMAT, LAYOUTS, LEGACY_ARG, OP_HEADER, REGION_RECORD, FormatLayout

_U32 = struct.Struct("<I")


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return _U32.pack(len(b)) + b


def metadata_outside_format(prog: m.Program, layout: FormatLayout) -> list:
    """``[(where, message)]`` for metadata that ``layout``'s format cannot hold.

    Only a model built in memory or read from a ``.wrpk`` can carry them: a
    producer version, module extras or a pointer-location count in a format
    without them.  :func:`encode_metadata` refuses them (instead of dropping
    them) and :mod:`wrpkit.checks.legacy` reports them.
    """
    out = []
    v = prog.format_version
    if not layout.producer_version and prog.warp_version:
        out.append(("metadata", f"format {v} records no producer version, found {prog.warp_version!r}"))
    if not layout.module_extras:
        for i, mod in enumerate(prog.modules):
            if (mod.binary_digest or mod.source_filename or mod.source_digest or mod.binary_kind != 0
                    or mod.fallback_reason != 1 or mod.recipe != m.CudaCompileRecipe()):
                out.append((f"modules[{i}]", f"format {v} module records carry no binary digest, source, binary "
                                             "kind, fallback reason or compile recipe"))
    if not layout.pointer_location_count:
        for i, pl in enumerate(prog.pointer_locations):
            if pl.count:
                out.append((f"pointer_locations[{i}]", f"format {v} pointer locations record no slot count, "
                                                       f"found {pl.count}"))
    return out


def encode_metadata(prog: m.Program, layout: FormatLayout) -> bytes:
    """The METADATA section's bytes.

    Raises:
        WrpFormatError: The metadata holds what the format cannot (see :func:`metadata_outside_format`).
    """
    for where, message in metadata_outside_format(prog, layout)[:1]:
        raise WrpFormatError(message, field=where)
    out = bytearray()
    out += _U32.pack(prog.format_version)
    if layout.producer_version:
        out += _str(prog.warp_version)
    out += _U32.pack(prog.target_arch)
    for n in (len(prog.modules), len(prog.kernels), len(prog.bindings), len(prog.meshes),
              len(prog.pointer_locations)):
        out += _U32.pack(n)
    for mod in prog.modules:
        r = mod.recipe
        if not layout.module_extras:
            out += (_str(mod.module_hash) + _str(mod.module_name) + _str(mod.binary_filename)
                    + _U32.pack(mod.target_arch))
            continue
        out += (_str(mod.module_hash) + _str(mod.module_name) + _str(mod.binary_filename)
                + _U32.pack(mod.target_arch) + _str(mod.binary_digest) + _str(mod.source_filename)
                + _str(mod.source_digest) + bytes((mod.binary_kind, mod.fallback_reason))
                + layout.recipe.struct.pack(r.debug, r.optimization_level, r.verify_fp, r.fast_math, r.fuse_fp,
                                            r.lineinfo, r.arch_suffix, bytes(9)))
    for k in prog.kernels:
        out += (_str(k.kernel_key) + _str(k.module_hash) + _str(k.forward_name) + _str(k.backward_name)
                + struct.pack("<III", k.forward_smem_bytes, k.backward_smem_bytes, k.block_dim))
    for b in prog.bindings:
        out += _str(b.name) + _U32.pack(b.region_id)
    for me in prog.meshes:
        out += layout.mesh.struct.pack(me.num_points, me.num_tris, int(me.support_winding_number),
                                       me.bvh_constructor, me.bvh_leaf_size, me.points_region_id,
                                       me.indices_region_id, me.velocities_region_id, me.original_ptr)
    for pl in prog.pointer_locations:
        vals = (pl.region_id, pl.offset, pl.stride, pl.count)
        out += layout.pointer_location.pack(*vals[:4 if layout.producer_version else 3])
    return bytes(out)


def iter_memory_section(prog: m.Program) -> Iterator:
    """Yield the MEMORY section as chunks (region data is yielded as-is, uncopied)."""
    yield _U32.pack(len(prog.regions))
    for r in prog.regions:
        yield REGION_RECORD.pack(r.region_id, r.element_size, r.size, int(r.has_initial_data), bytes(7))
        if r.has_initial_data:
            if r.data is None or len(r.data) != r.size:
                raise WrpFormatError(f"region {r.region_id} is marked as having initial data but carries "
                                     f"{0 if r.data is None else len(r.data)} of its {r.size} bytes")
            yield r.data


def memory_section_size(prog: m.Program) -> int:
    """Byte size of the MEMORY section, computed without building it."""
    return 4 + sum(REGION_RECORD.size + (r.size if r.has_initial_data else 0) for r in prog.regions)


def encode_ops(ops: list, layout: FormatLayout, out: bytearray, memo: dict | None = None) -> None:
    """Append the records of ``ops`` (no count word) to ``out``.

    ``memo`` maps ``id(op)`` to that op's record, so that an op object listed
    many times (a ``.wrpk`` decodes identical ops into one object) is encoded
    once; pass one dict for the whole program.
    """
    if memo is None:
        memo = {}
    for op in ops:
        t = op.op_type
        if t != OpType.IF and t != OpType.WHILE:
            done = memo.get(id(op))
            if done is not None:
                if type(done) is tuple:  # (buffer, start, end) of its first encoding
                    done = memo[id(op)] = bytes(done[0][done[1]:done[2]])
                out += done
                continue
            start = len(out)
        if t != OpType.KERNEL_LAUNCH and t not in layout.ops:  # only a .wrpk can hold one
            raise WrpFormatError(f"op type {int(t)} is {OpType(t).name}, which format {layout.version} does not "
                                 "have, so it cannot be written as a .wrp of that format")
        if t == OpType.KERNEL_LAUNCH:
            _encode_launch(op, layout, out)
        elif t in (OpType.IF, OpType.WHILE):
            a, b = bytearray(), bytearray()
            first = op.then_ops if t == OpType.IF else op.body
            encode_ops(first, layout, a, memo)
            if t == OpType.IF:
                encode_ops(op.else_ops, layout, b, memo)
            rl = layout.ops[t]
            out += OP_HEADER.pack(t, 8 + rl.size + len(a) + len(b))
            n_b = len(op.else_ops) if t == OpType.IF else 0
            out += rl.struct.pack(op.cond_region_id, bytes(4), op.cond_offset, len(a), len(first), len(b), n_b)
            out += a
            out += b
        else:
            rl = layout.ops[t]
            vals = []
            extra = b""
            for name in rl.names:
                if name.startswith("_pad"):
                    vals.append(b"")  # "Ns" packs as N zero bytes
                elif name == "srcsize":
                    vals.append(len(op.value))
                    extra = bytes(op.value)
                elif name == "size" and t == OpType.MEMCPY_H2D:
                    vals.append(len(op.data))
                    extra = bytes(op.data)
                else:
                    v = getattr(op, name)
                    vals.append(int(v) if isinstance(v, bool) else v)
            if t == OpType.BSR_TRANSPOSE:
                extra = struct.pack(f"<{len(op.padded_tail)}i", *op.padded_tail)
            out += OP_HEADER.pack(t, 8 + rl.size + len(extra))
            out += rl.struct.pack(*vals)
            out += extra
        if t != OpType.IF and t != OpType.WHILE:
            memo[id(op)] = (out, start, len(out))


def _leaf_record_size(op, layout: FormatLayout) -> int:
    t = op.op_type
    if t == OpType.KERNEL_LAUNCH:
        if layout.legacy_args:
            return (8 + layout.launch.size + len(op.kernel_key.encode("utf-8"))
                    + len(op.module_hash.encode("utf-8")) + LEGACY_ARG.size * len(op.legacy_args)
                    + 4 * len(op.handle_offsets))
        blocks = len(op.params) + (0 if op.is_forward else len(op.adjoint_params))
        return (8 + layout.launch.size + len(op.kernel_key.encode("utf-8")) + len(op.module_hash.encode("utf-8"))
                + 16 * blocks + 24 * len(op.relocations) + len(op.value_data))
    extra = 0
    # An op the format does not have (only a .wrpk can hold one; validation refuses it) is sized as
    # the format that has it writes it: those records never changed.
    rl = layout.ops.get(t) or LAYOUTS[CURRENT_FORMAT].ops[t]
    if t == OpType.BSR_TRANSPOSE:
        extra = 4 * len(op.padded_tail)
    elif t == OpType.MEMCPY_H2D:
        extra = len(op.data)
    elif "srcsize" in rl.names:
        extra = len(op.value)
    return 8 + rl.size + extra


def ops_section_size(prog: m.Program, layout: FormatLayout) -> int:
    """Byte size of the OPERATIONS section, computed without building it.

    Each distinct op object is sized once, so a program whose op lists
    repeat one object many times (as a ``.wrpk`` decodes) costs time in
    proportion to its distinct ops, whatever size it expands to.
    """
    sizes: dict = {}

    def size(ops) -> int:
        total = 0
        for op in ops:
            n = sizes.get(id(op))
            if n is None:
                t = op.op_type
                if t == OpType.IF:
                    n = 8 + LAYOUTS[CURRENT_FORMAT].ops[t].size + size(op.then_ops) + size(op.else_ops)
                elif t == OpType.WHILE:
                    n = 8 + LAYOUTS[CURRENT_FORMAT].ops[t].size + size(op.body)
                else:
                    n = _leaf_record_size(op, layout)
                sizes[id(op)] = n
            total += n
        return total

    return 4 + size(prog.ops)


def metadata_section_size(prog: m.Program, layout: FormatLayout) -> int:
    """Byte size of the METADATA section, computed without building it."""

    def strs(*values) -> int:
        return sum(4 + len(v.encode("utf-8")) for v in values)

    n = 4 + (strs(prog.warp_version) if layout.producer_version else 0) + 4 + 5 * 4
    for mod in prog.modules:
        if not layout.module_extras:
            n += strs(mod.module_hash, mod.module_name, mod.binary_filename) + 4
            continue
        n += (strs(mod.module_hash, mod.module_name, mod.binary_filename, mod.binary_digest, mod.source_filename,
                   mod.source_digest) + 4 + 2 + layout.recipe.struct.size)
    for k in prog.kernels:
        n += strs(k.kernel_key, k.module_hash, k.forward_name, k.backward_name) + 12
    for b in prog.bindings:
        n += strs(b.name) + 4
    n += len(prog.meshes) * layout.mesh.struct.size + len(prog.pointer_locations) * layout.pointer_location.size
    return n


def _check_launch_fits(op: m.KernelLaunch, layout: FormatLayout) -> None:
    """Refuse to encode a launch whose content the format cannot hold."""
    if layout.legacy_args:
        if op.params or op.adjoint_params or op.relocations or len(op.value_data) or not op.is_forward:
            raise WrpFormatError(f"launch of {op.kernel_key!r} has bindings or value data, which format "
                                 f"{layout.version} cannot hold (it records argument descriptors)")
    elif op.legacy_args or op.handle_offsets:
        raise WrpFormatError(f"launch of {op.kernel_key!r} has format-3 argument descriptors, which format "
                             f"{layout.version} cannot hold", hint="Use `wrp upgrade` to re-encode them.")
    if layout.version < 13 and (op.grid_stride != 0 or op.cluster_dim != 1):
        raise WrpFormatError(f"launch of {op.kernel_key!r} has grid_stride {op.grid_stride} and cluster_dim "
                             f"{op.cluster_dim}; format {layout.version} records neither (only 0 and 1 fit)")


def _encode_launch_legacy(op: m.KernelLaunch, layout: FormatLayout, out: bytearray) -> None:
    _check_launch_fits(op, layout)
    key = op.kernel_key.encode("utf-8")
    mh = op.module_hash.encode("utf-8")
    out += OP_HEADER.pack(OpType.KERNEL_LAUNCH, _leaf_record_size(op, layout))
    common = (*op.shape, op.ndim, op.size, op.dim, op.max_blocks, op.block_dim, op.smem_bytes, int(op.is_forward),
              b"", len(key), len(mh))
    if layout.legacy_args:
        out += layout.launch.struct.pack(*common, len(op.legacy_args), len(op.handle_offsets))
        out += key
        out += mh
        for a in op.legacy_args:
            out += LEGACY_ARG.pack(a.is_array, a.ndim, a.param_index, a.region_id, a.byte_offset, *a.shape,
                                   *a.strides, a.element_size, b"")
        out += struct.pack(f"<{len(op.handle_offsets)}I", *op.handle_offsets)
        return
    out += layout.launch.struct.pack(*common, len(op.params), b"", len(op.relocations), len(op.value_data))
    _encode_launch_tail(op, layout, out, key, mh)


def _encode_launch(op: m.KernelLaunch, layout: FormatLayout, out: bytearray) -> None:
    if layout.version < 13 or op.legacy_args or op.handle_offsets:
        _encode_launch_legacy(op, layout, out)
        return
    key = op.kernel_key.encode("utf-8")
    mh = op.module_hash.encode("utf-8")
    n_params = len(op.params)
    blocks = op.params if op.is_forward else op.params + op.adjoint_params
    total = (8 + layout.launch.size + len(key) + len(mh) + 16 * len(blocks) + 24 * len(op.relocations)
             + len(op.value_data))
    out += OP_HEADER.pack(OpType.KERNEL_LAUNCH, total)
    out += layout.launch.struct.pack(*op.shape, op.ndim, op.size, op.dim, op.max_blocks, op.block_dim,
                                     op.smem_bytes, op.grid_stride, int(op.is_forward), op.cluster_dim,
                                     b"\0\0", len(key), len(mh), n_params, b"\0\0", len(op.relocations),
                                     len(op.value_data))
    _encode_launch_tail(op, layout, out, key, mh)


def _encode_launch_tail(op: m.KernelLaunch, layout: FormatLayout, out: bytearray, key: bytes, mh: bytes) -> None:
    blocks = op.params if op.is_forward else op.params + op.adjoint_params
    out += key
    out += mh
    pack_param = layout.launch_param.pack
    for p in blocks:
        out += pack_param(*p)
    pack_reloc = layout.reloc.struct.pack
    for r in op.relocations:
        out += pack_reloc(r.value_byte_offset, r.region_id, r.region_offset, r.kind, b"")
    out += op.value_data

