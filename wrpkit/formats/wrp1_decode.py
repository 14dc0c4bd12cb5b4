"""The WRP1 decoder's section readers: METADATA, MEMORY and OPERATIONS records.

:func:`wrpkit.formats.wrp1.decode_wrp1` checks the header and the section
table and hands each section to :func:`decode_metadata`,
:func:`decode_memory` and :func:`decode_operations`.  Every count, length and
offset is checked before it is used and every error names the field and its
absolute byte offset; what differs between formats comes from the
:class:`~wrpkit.formats.wrp1_layout.FormatLayout` of each.
"""

from __future__ import annotations

import struct

from .. import model as m
from ..errors import WrpFormatError
from ..apic_types import OpType
from .wrp1_layout import BOOL_FIELDS, LAYOUTS, LEGACY_ARG, OP_HEADER, REGION_RECORD, FormatLayout
from .wrp1_limits import MAX_DIGEST, MAX_FILENAME, MAX_HASH, MAX_VERSION, Limits

_U32 = struct.Struct("<I")


class Cursor:
    """Bounds-checked sequential reads from ``buf[pos:end]``.

    Every read names the field it reads so that a failure says which field
    and at which absolute offset.
    """

    __slots__ = ("buf", "pos", "end", "section")

    def __init__(self, buf, pos: int, end: int, section: str):
        self.buf, self.pos, self.end, self.section = buf, pos, end, section

    def need(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.end:
            raise WrpFormatError(
                f"needs {n} bytes but only {self.end - self.pos} remain in the {self.section} section",
                field=what, offset=self.pos)
        p = self.pos
        self.pos += n
        return p

    def unpack(self, st: struct.Struct, what: str) -> tuple:
        p = self.need(st.size, what)
        return st.unpack_from(self.buf, p)

    def u32(self, what: str) -> int:
        return self.unpack(_U32, what)[0]

    def u8(self, what: str) -> int:
        p = self.need(1, what)
        return self.buf[p]

    def string(self, what: str, limits: Limits, cap: int = None) -> str:
        at = self.pos
        n = self.u32(what + ".length")
        cap = limits.max_string if cap is None else min(cap, limits.max_string)
        if n > cap:
            raise WrpFormatError(f"string length {n} exceeds the limit of {cap}", field=what, offset=at)
        p = self.need(n, what)
        raw = bytes(self.buf[p:p + n])
        if b"\0" in raw:
            raise WrpFormatError("string contains a NUL byte", field=what, offset=at)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise WrpFormatError(f"string is not valid UTF-8 ({e.reason})", field=what, offset=p) from None


def check_zero(raw: bytes, what: str, offset: int) -> None:
    if any(raw):
        raise WrpFormatError("reserved bytes must be zero", field=what, offset=offset)


def check_count(n: int, cap: int, what: str, offset: int) -> None:
    if n > cap:
        raise WrpFormatError(f"count {n} exceeds the limit of {cap}", field=what, offset=offset)


def decode_metadata(buf, off: int, n: int, prog: m.Program, layout: FormatLayout, limits: Limits):
    c = Cursor(buf, off, off + n, "METADATA")
    at = c.pos
    version = c.u32("metadata.format_version")
    if version != prog.format_version:
        raise WrpFormatError(f"metadata format version {version} differs from the header's "
                             f"{prog.format_version}", field="metadata.format_version", offset=at)
    at = c.pos
    if layout.producer_version:
        prog.warp_version = c.string("metadata.warp_version", limits, MAX_VERSION)
        if not prog.warp_version or not all(0x20 < ord(ch) < 0x7F for ch in prog.warp_version):
            raise WrpFormatError("producer Warp version must be non-empty printable ASCII",
                                 field="metadata.warp_version", offset=at)
    at = c.pos
    arch = c.u32("metadata.target_arch")
    if arch != prog.target_arch:
        raise WrpFormatError(f"metadata target arch {arch} differs from the header's {prog.target_arch}",
                             field="metadata.target_arch", offset=at)
    counts = []
    caps = [limits.max_modules, limits.max_kernels, limits.max_bindings, limits.max_meshes,
            limits.max_pointer_locations]
    for name, cap in zip(("num_modules", "num_kernels", "num_bindings", "num_meshes",
                          "num_pointer_locations"), caps):
        at = c.pos
        v = c.u32("metadata." + name)
        check_count(v, cap, "metadata." + name, at)
        counts.append(v)
    n_mod, n_ker, n_bind, n_mesh, n_ptr = counts

    rec = layout.recipe
    for i in range(n_mod):
        w = f"modules[{i}]"
        mh = c.string(w + ".module_hash", limits, MAX_HASH)
        mn = c.string(w + ".module_name", limits)
        bf = c.string(w + ".binary_filename", limits, MAX_FILENAME)
        arch = c.u32(w + ".target_arch")
        if not layout.module_extras:
            prog.modules.append(m.Module(mh, mn, bf, arch))
            continue
        bd = c.string(w + ".binary_digest", limits, MAX_DIGEST)
        sf = c.string(w + ".source_filename", limits, MAX_FILENAME)
        sd = c.string(w + ".source_digest", limits, MAX_DIGEST)
        kind = c.u8(w + ".binary_kind")
        reason = c.u8(w + ".fallback_reason")
        at = c.pos
        vals = c.unpack(rec.struct, w + ".recipe")
        check_zero(vals[-1], w + ".recipe._reserved", at + 7)
        prog.modules.append(m.Module(mh, mn, bf, arch, bd, sf, sd, kind, reason,
                                     m.CudaCompileRecipe(*vals[:-1])))
    for i in range(n_ker):
        w = f"kernels[{i}]"
        k = m.Kernel(c.string(w + ".kernel_key", limits), c.string(w + ".module_hash", limits, MAX_HASH),
                     c.string(w + ".forward_name", limits), c.string(w + ".backward_name", limits),
                     c.u32(w + ".forward_smem_bytes"), c.u32(w + ".backward_smem_bytes"),
                     c.u32(w + ".block_dim"))
        prog.kernels.append(k)
    for i in range(n_bind):
        w = f"bindings[{i}]"
        prog.bindings.append(m.Binding(c.string(w + ".name", limits), c.u32(w + ".region_id")))
    mesh = layout.mesh
    for i in range(n_mesh):
        at = c.pos
        v = c.unpack(mesh.struct, f"meshes[{i}]")
        if v[2] > 1:
            raise WrpFormatError(f"must be 0 or 1, found {v[2]}", field=f"meshes[{i}].support_winding_number",
                                 offset=at + 8)
        prog.meshes.append(m.Mesh(v[0], v[1], bool(v[2]), *v[3:]))
    for i in range(n_ptr):
        v = c.unpack(layout.pointer_location, f"pointer_locations[{i}]")
        # Before format 18 there is no count: stride 0 is one slot, else
        # every stride to the end of the region.  0 stands for "not recorded".
        prog.pointer_locations.append(m.PointerLocation(*v) if len(v) == 4 else m.PointerLocation(*v, 0))
    if c.pos != c.end:
        raise WrpFormatError(f"{c.end - c.pos} bytes follow the last metadata record",
                             field="metadata", offset=c.pos)


def decode_memory(buf, off: int, n: int, prog: m.Program, limits: Limits):
    c = Cursor(buf, off, off + n, "MEMORY")
    count = c.u32("memory.region_count")
    check_count(count, limits.max_regions, "memory.region_count", off)
    last_id = 0
    total = 0
    for i in range(count):
        at = c.pos
        w = f"regions[{i}]"
        rid, esize, rsize, has, pad = c.unpack(REGION_RECORD, w)
        check_zero(pad, w + "._pad", at + 17)
        if rid <= last_id:
            raise WrpFormatError(f"region id {rid} is not above the previous id {last_id} (ids must be "
                                 f"unique, ascending and >= 1)", field=w + ".region_id", offset=at)
        if has > 1:
            raise WrpFormatError(f"initial-data flag must be 0 or 1, found {has}",
                                 field=w + ".has_initial_data", offset=at + 16)
        if rsize > limits.max_region_size:
            raise WrpFormatError(f"region size {rsize} exceeds the limit of {limits.max_region_size}",
                                 field=w + ".size", offset=at + 8)
        total += rsize
        if total > limits.max_memory:
            raise WrpFormatError(f"regions add up to more than the limit of {limits.max_memory} bytes",
                                 field=w + ".size", offset=at + 8)
        data = None
        if has:
            p = c.need(rsize, w + ".initial_data")
            data = buf[p:p + rsize]
        prog.regions.append(m.Region(rid, esize, rsize, bool(has), data, at))
        last_id = rid
    if c.pos != c.end:
        raise WrpFormatError(f"{c.end - c.pos} bytes follow the last region record", field="memory",
                             offset=c.pos)



def decode_operations(buf, off: int, n: int, prog: m.Program, layout: FormatLayout, limits: Limits,
                       share_ops: bool = False):
    if n < 4:
        raise WrpFormatError("operations section is shorter than its 4-byte op count",
                             field="operations.op_count", offset=off)
    count = _U32.unpack_from(buf, off)[0]
    check_count(count, limits.max_ops, "operations.op_count", off)
    # Remaining op budget, launch-tail cache, and (share_ops) record bytes -> decoded op.
    budget = [limits.max_ops, {}, {} if share_ops else None]
    end = _decode_op_list(buf, off + 4, off + n, count, "ops", 0, prog.ops, layout, limits, budget)
    if end != off + n:
        raise WrpFormatError(f"{off + n - end} bytes follow the last operation", field="operations",
                             offset=end)


def _decode_op_list(buf, pos, end, count, path, depth, out, layout, limits, budget) -> int:
    if depth > limits.max_depth:
        raise WrpFormatError(f"conditional nesting deeper than {limits.max_depth} levels", field=path,
                             offset=pos)
    append = out.append
    cache, shared = budget[1], budget[2]
    if_type, while_type = OpType.IF, OpType.WHILE
    for i in range(count):
        if end - pos < 8:
            raise WrpFormatError("truncated op header", field=f"{path}[{i}]", offset=pos)
        budget[0] -= 1
        if budget[0] < 0:
            raise WrpFormatError(f"more than {limits.max_ops} operations in total", field=f"{path}[{i}]",
                                 offset=pos)
        op_type, total = OP_HEADER.unpack_from(buf, pos)
        if total < 8 or total > end - pos:
            raise WrpFormatError(f"op size {total} does not fit the {end - pos} bytes left",
                                 field=f"{path}[{i}].total_size", offset=pos + 4)
        if shared is not None and total <= _SHARE_MAX and op_type != if_type and op_type != while_type:
            # Records are checked as they decode, so a repeat of a record
            # that decoded cleanly is itself clean (and needs no field path).
            rec = bytes(buf[pos:pos + total])
            op = shared.get(rec)
            if op is None:
                op = _decode_leaf(buf, pos, total, op_type, f"{path}[{i}]", layout, cache)
                shared[rec] = op
            append(op)
            pos += total
            continue
        w = f"{path}[{i}]"
        if (op_type == if_type or op_type == while_type) and op_type in layout.ops:
            append(_decode_cond(buf, pos, total, op_type, w, depth, layout, limits, budget))
        else:
            append(_decode_leaf(buf, pos, total, op_type, w, layout, cache))
        pos += total
    return pos


#: Records up to this size are shared by ``decode_wrp1(share_ops=True)``;
#: larger ones (MEMCPY_H2D payloads) are rare and cost their bytes to key.
_SHARE_MAX = 4096


def _decode_leaf(buf, pos, total, op_type, w, layout, cache):
    """One op other than IF and WHILE."""
    if op_type == OpType.KERNEL_LAUNCH:
        return _decode_launch(buf, pos, total, w, layout, cache)
    if op_type in layout.ops:
        return _decode_fixed(buf, pos, total, op_type, w, layout)
    if op_type == OpType.MEMCPY_D2H:
        what = "reserved by Warp (MEMCPY_D2H)"
    elif op_type in LAYOUTS[18].ops:
        what = f"{OpType(op_type).name}, which format {layout.version} does not have"
    else:
        what = "unknown"
    raise WrpFormatError(f"op type {op_type} is {what}", field=w + ".op_type", offset=pos)


def _fixed_values(buf, pos, total, rl, w, exact=True):
    if total < 8 + rl.size or (exact and total != 8 + rl.size):
        raise WrpFormatError(f"{rl.name} record must be {8 + rl.size} bytes, header says {total}",
                             field=w + ".total_size", offset=pos + 4)
    vals = rl.struct.unpack_from(buf, pos + 8)
    for i in rl.pads:
        check_zero(vals[i], f"{w}.{rl.names[i]}", pos + 8)
    return {k: v for k, v in zip(rl.names, vals) if not k.startswith("_pad")}


def _bools(d, w, pos):
    for k in BOOL_FIELDS.intersection(d):
        v = d[k]
        if v > 1:
            raise WrpFormatError(f"must be 0 or 1, found {v}", field=f"{w}.{k}", offset=pos)
        d[k] = bool(v)


def _decode_fixed(buf, pos, total, op_type, w, layout):
    rl = layout.ops[op_type]
    if op_type == OpType.MEMCPY_H2D:
        d = _fixed_values(buf, pos, total, rl, w, exact=False)
        size = d.pop("size")
        if total != 8 + rl.size + size:
            raise WrpFormatError(f"MEMCPY_H2D of {size} bytes needs a record of {8 + rl.size + size} bytes, "
                                 f"header says {total}", field=w + ".total_size", offset=pos + 4)
        start = pos + 8 + rl.size
        return m.MemcpyH2D(d["dst_region_id"], d["dst_offset"], buf[start:start + size], at=pos)
    if op_type == OpType.MEMTILE:
        d = _fixed_values(buf, pos, total, rl, w, exact=False)
        srcsize = d.pop("srcsize")
        if srcsize == 0 or total != 8 + rl.size + srcsize:
            raise WrpFormatError(f"MEMTILE with a {srcsize}-byte value needs a record of "
                                 f"{8 + rl.size + srcsize} bytes (and a non-zero value size), header says "
                                 f"{total}", field=w + ".total_size", offset=pos + 4)
        start = pos + 8 + rl.size
        return m.Memtile(d["region_id"], d["offset"], d["count"], bytes(buf[start:start + srcsize]), at=pos)
    if op_type == OpType.BSR_TRANSPOSE:
        d = _fixed_values(buf, pos, total, rl, w, exact=False)
        tail = total - 8 - rl.size
        if tail and not layout.bsr_transpose_tail:
            raise WrpFormatError(f"BSR_TRANSPOSE has no tail in format {layout.version}, found {tail} bytes",
                                 field=w + ".total_size", offset=pos + 4)
        if tail % 4:
            raise WrpFormatError(f"BSR_TRANSPOSE tail of {tail} bytes is not a whole number of int32",
                                 field=w + ".total_size", offset=pos + 4)
        start = pos + 8 + rl.size
        d["padded_tail"] = struct.unpack_from(f"<{tail // 4}i", buf, start)
        return m.BsrTranspose(**d, at=pos)
    d = _fixed_values(buf, pos, total, rl, w)
    _bools(d, w, pos)
    return m.OP_CLASSES[op_type](**d, at=pos)


def _decode_cond(buf, pos, total, op_type, w, depth, layout, limits, budget):
    rl = layout.ops[op_type]
    if depth + 1 > limits.max_depth:
        raise WrpFormatError(f"conditional nesting deeper than {limits.max_depth} levels", field=w, offset=pos)
    d = _fixed_values(buf, pos, total, rl, w, exact=False)
    a_size, a_count = d["branch_a_size"], d["branch_a_op_count"]
    b_size, b_count = d["branch_b_size"], d["branch_b_op_count"]
    if 8 + rl.size + a_size + b_size != total:
        raise WrpFormatError(f"branch sizes {a_size} + {b_size} do not add up to the record size {total}",
                             field=w + ".total_size", offset=pos + 4)
    for size, cnt, name in ((a_size, a_count, "branch_a"), (b_size, b_count, "branch_b")):
        if (size == 0) != (cnt == 0):
            raise WrpFormatError(f"{name} has {size} bytes but {cnt} ops", field=f"{w}.{name}_size",
                                 offset=pos + 24)
    if op_type == OpType.WHILE and b_size:
        raise WrpFormatError("WHILE must have an empty second branch", field=w + ".branch_b_size",
                             offset=pos + 32)
    a_start = pos + 8 + rl.size
    branches = []
    for start, size, cnt, name in ((a_start, a_size, a_count, "then" if op_type == OpType.IF else "body"),
                                   (a_start + a_size, b_size, b_count, "else")):
        ops: list = []
        if cnt:
            end = _decode_op_list(buf, start, start + size, cnt, f"{w}.{name}", depth + 1, ops, layout,
                                  limits, budget)
            if end != start + size:
                raise WrpFormatError(f"{start + size - end} bytes follow the last op of the {name} branch",
                                     field=f"{w}.{name}", offset=end)
        branches.append(ops)
    if op_type == OpType.IF:
        return m.If(d["cond_region_id"], d["cond_offset"], branches[0], branches[1], at=pos)
    return m.While(d["cond_region_id"], d["cond_offset"], branches[0], at=pos)


def _decode_launch(buf, pos, total, w, layout, cache):
    if layout.version < 13:
        return _decode_launch_legacy(buf, pos, total, w, layout)
    lr = layout.launch
    if total < 8 + lr.size:
        raise WrpFormatError(f"KERNEL_LAUNCH record must be at least {8 + lr.size} bytes, header says {total}",
                             field=w + ".total_size", offset=pos + 4)
    (s0, s1, s2, s3, ndim, size, dim, max_blocks, block_dim, smem, grid_stride, is_fwd, cluster, pad1,
     key_len, hash_len, n_params, pad2, n_relocs, vsize) = lr.struct.unpack_from(buf, pos + 8)
    if pad1 != b"\0\0":
        check_zero(pad1, w + "._pad1", pos + 62)
    if pad2 != b"\0\0":
        check_zero(pad2, w + "._pad2", pos + 70)
    if is_fwd > 1:
        raise WrpFormatError(f"must be 0 or 1, found {is_fwd}", field=w + ".is_forward", offset=pos + 60)
    n_blocks = 1 if is_fwd else 2
    head = 8 + lr.size
    tail = key_len + hash_len + n_blocks * n_params * 16 + n_relocs * 24
    if head + tail + vsize != total:
        raise WrpFormatError(f"record size {total} differs from the {head + tail + vsize} bytes its strings, "
                             f"{n_blocks * n_params} params, {n_relocs} relocations and {vsize} value bytes "
                             f"need", field=w + ".total_size", offset=pos + 4)
    p = pos + head
    # Launches of one kernel with the same arguments repeat the same strings,
    # bindings and relocations byte for byte; decode each distinct tail once.
    key = (is_fwd, key_len, hash_len, n_params, bytes(buf[p:p + tail]))
    parts = cache.get(key)
    if parts is None:
        parts = _decode_launch_tail(buf, p, key_len, hash_len, n_params, n_relocs, is_fwd, w)
        cache[key] = parts
    kkey, mh, params, adj, relocs = parts
    p += tail
    return m.KernelLaunch((s0, s1, s2, s3), ndim, size, dim, max_blocks, block_dim, smem, grid_stride,
                          bool(is_fwd), cluster, kkey, mh, list(params), list(adj), list(relocs),
                          buf[p:p + vsize], at=pos)


def _decode_launch_legacy(buf, pos, total, w, layout):
    """A launch of format 3 or 10 (no grid_stride/cluster_dim; format 3: argument descriptors).

    The model gets what 1.15+ write on CPU for the missing fields:
    ``grid_stride`` 0 and ``cluster_dim`` 1.
    """
    lr = layout.launch
    head = 8 + lr.size
    if total < head:
        raise WrpFormatError(f"KERNEL_LAUNCH record must be at least {head} bytes, header says {total}",
                             field=w + ".total_size", offset=pos + 4)
    vals = lr.struct.unpack_from(buf, pos + 8)
    d = dict(zip(lr.names[1:], vals[4:]))
    d["shape"] = vals[:4]
    for i in lr.pads:
        check_zero(d[lr.names[i]], f"{w}.{lr.names[i]}", pos + 8)
    if d["is_forward"] > 1:
        raise WrpFormatError(f"must be 0 or 1, found {d['is_forward']}", field=w + ".is_forward",
                             offset=pos + 56)
    if layout.legacy_args and d["is_forward"] == 0:
        # Refused on the way in, as wrp-replay's decoder refuses it: decoded, it would convert to
        # .wrpk/.json but never back (format 3 records no adjoint block).
        raise WrpFormatError(f"format {layout.version} cannot hold a backward launch (Warp {layout.releases} refuses "
                             "adjoint launches in capture)", field=w + ".is_forward", offset=pos + 56)
    key_len, hash_len, n_params = d["kernel_key_len"], d["module_hash_len"], d["num_params"]
    p = pos + head
    if layout.legacy_args:
        n_handles = d["num_handle_offsets"]
        need = head + key_len + hash_len + LEGACY_ARG.size * n_params + 4 * n_handles
        if need != total:
            raise WrpFormatError(f"record size {total} differs from the {need} bytes its strings, {n_params} "
                                 f"argument descriptors and {n_handles} handle offsets need",
                                 field=w + ".total_size", offset=pos + 4)
        kkey, mh, _, _, _ = _decode_launch_tail(buf, p, key_len, hash_len, 0, 0, True, w)
        p += key_len + hash_len
        args = []
        for j, v in enumerate(LEGACY_ARG.iter_unpack(buf[p:p + LEGACY_ARG.size * n_params])):
            at = p + j * LEGACY_ARG.size
            if v[-1] != b"\0\0\0\0":
                check_zero(v[-1], f"{w}.legacy_args[{j}]._pad", at + 84)
            if v[0] > 1:
                raise WrpFormatError(f"must be 0 or 1, found {v[0]}", field=f"{w}.legacy_args[{j}].is_array",
                                     offset=at)
            args.append(m.LegacyArg(v[0], v[1], v[2], v[3], v[4], tuple(v[5:9]), tuple(v[9:13]), v[13]))
        p += LEGACY_ARG.size * n_params
        handles = list(struct.unpack_from(f"<{n_handles}I", buf, p))
        return m.KernelLaunch(tuple(d["shape"]), d["ndim"], d["size"], d["dim"], d["max_blocks"], d["block_dim"],
                              d["smem_bytes"], 0, bool(d["is_forward"]), 1, kkey, mh, [], [], [], b"",
                              legacy_args=args, handle_offsets=handles, at=pos)
    n_relocs, vsize, is_fwd = d["num_relocs"], d["value_data_size"], d["is_forward"]
    n_blocks = 1 if is_fwd else 2
    tail = key_len + hash_len + n_blocks * n_params * 16 + n_relocs * 24
    if head + tail + vsize != total:
        raise WrpFormatError(f"record size {total} differs from the {head + tail + vsize} bytes its strings, "
                             f"{n_blocks * n_params} params, {n_relocs} relocations and {vsize} value bytes "
                             f"need", field=w + ".total_size", offset=pos + 4)
    kkey, mh, params, adj, relocs = _decode_launch_tail(buf, p, key_len, hash_len, n_params, n_relocs, is_fwd, w)
    p += tail
    return m.KernelLaunch(tuple(d["shape"]), d["ndim"], d["size"], d["dim"], d["max_blocks"], d["block_dim"],
                          d["smem_bytes"], 0, bool(is_fwd), 1, kkey, mh, list(params), list(adj), list(relocs),
                          buf[p:p + vsize], at=pos)


def _decode_launch_tail(buf, p, key_len, hash_len, n_params, n_relocs, is_fwd, w):
    try:
        key = bytes(buf[p:p + key_len]).decode("utf-8")
        mh = bytes(buf[p + key_len:p + key_len + hash_len]).decode("utf-8")
    except UnicodeDecodeError:
        raise WrpFormatError("kernel key or module hash is not valid UTF-8", field=w + ".kernel_key",
                             offset=p) from None
    p += key_len + hash_len
    params = tuple(map(m.LaunchParam._make, struct.iter_unpack("<HHIII", buf[p:p + n_params * 16])))
    p += n_params * 16
    adj = ()
    if not is_fwd:
        adj = tuple(map(m.LaunchParam._make, struct.iter_unpack("<HHIII", buf[p:p + n_params * 16])))
        p += n_params * 16
    relocs = []
    for j, (vbo, rid, roff, kind, rpad) in enumerate(struct.iter_unpack("<IiQB7s", buf[p:p + n_relocs * 24])):
        if rpad != b"\0\0\0\0\0\0\0":
            check_zero(rpad, f"{w}.relocations[{j}]._pad", p + j * 24 + 17)
        relocs.append(m.Relocation(vbo, rid, roff, kind))
    return key, mh, params, adj, tuple(relocs)

