"""Reading ``.wrpk`` bundles: the verifying FlatBuffer reader.

The Python FlatBuffers runtime has no verifier, so :func:`decode_wrpk`
checks every offset, length and alignment itself before it reads, bounds the
number of tables it visits (so a buffer whose offsets alias cannot blow up)
and the nesting depth.  :func:`decode_wrpk` is the one entry point: it reads
the header (:func:`~.blobs.read_header`), checks the manifest's padding,
SHA-256 and identifier, walks the FlatBuffer, bounds its expansion, then
checks the blobs (:func:`~.blobs.check_blobs`), in that order.  Decoded
blob fields are ``memoryview`` slices of the input buffer.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Optional

from ... import model as m
from ...errors import WrpFormatError, WrpIntegrityError, WrpVersionError
from ...apic_types import OpType
from .blobs import as_bytes_view, check_blobs, read_header
from .tables import (_ALIGNS, _H, _I32, _LEGACY, _SCALARS, _SIZES, _U32, _ZERO7, EXPANSION_FACTOR, EXPANSION_FLOOR,
                     FILE_IDENTIFIER, HEADER_SIZE, MAX_DEPTH, OP_TABLES, TABLES, _is_offset, _tuple_getter)

class _Bad(Exception):
    """A structural error at manifest offset ``pos``; ``parts`` is the field path, innermost first."""

    def __init__(self, message: str, pos: int, part: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.parts = [part] if part else []


class _DecSpec:
    __slots__ = ("name", "fields", "defaults", "bools", "children", "slots")

    def __init__(self, name: str):
        self.name = name
        self.fields = TABLES[name]
        self.defaults = tuple(None if _is_offset(k) else (None if k == "recipe" else d)
                              for _, k, d in self.fields)
        self.bools = [i for i, (_, k, _) in enumerate(self.fields) if k == "bool"]
        self.children = [(i, f, k) for i, (f, k, _) in enumerate(self.fields) if _is_offset(k)]


_DEC = {name: _DecSpec(name) for name in TABLES}
_EMPTY = {"str": "", "bytes": b"", "u32v": (), "i32v": (), "i64v": ()}
_LIST_KINDS = {"params", "relocs", "legacy", "ops"}


class _DecPlan:
    __slots__ = ("struct", "getter", "size", "children")


class _Reader:
    def __init__(self, buf, max_depth: int, verifier_depth: bool = False):
        self.buf = buf
        self.n = len(buf)
        # flatbuffers::Verifier semantics (the Annotations buffer, which C++
        # checks with the Verifier): every table entered counts one level,
        # the root included, instead of only table-valued fields.  That buffer is decoded in
        # the same pass, without the FlatBuffers runtime: nested tables come back as their
        # fields (lists, in schema order), where the manifest's are only checked.
        self.vdepth = 0 if verifier_depth else None
        self.plans: dict = {}
        self.strings: dict = {}
        self.cache: dict = {}
        # Operation table position -> decoded op: a shared table decodes once,
        # into one object (ops from a .wrpk may alias; treat them as read-only).
        self.op_objects: dict = {}
        # Table visits: the Annotations buffer follows flatbuffers::Verifier
        # (every visit counts, at most size/4 + 1).  In the manifest, tables
        # of identical ops are shared and a step loop visits one per launch;
        # what bounds that walk is op_refs below, and this cap only mirrors
        # the one wrp-replay gives its Verifier (2 x size + 8), which no
        # manifest within op_refs reaches.
        self.budget = self.n // 4 + 1 if verifier_depth else 2 * self.n + 8
        # Operation vector entries walked, in all: a body vector shared by
        # many IF/WHILE tables is walked once per table, so without this a
        # small manifest could take minutes to walk before the expansion
        # limit could refuse it.  wrp-replay applies the same bound.
        self.op_refs = self.n // 4 + 1
        self.depth = 0
        self.max_depth = max_depth
        # (obj, attr, name, offset, length, sha256, manifest pos, chunk_length, chunk_sha256)
        self.blobs: list = []

    # -- tables ---------------------------------------------------------------

    def plan(self, spec: _DecSpec, vt: int, mod8: int, pos: int) -> _DecPlan:
        buf, n = self.buf, self.n
        # The rules of flatbuffers::Verifier, which wrp-replay's reader applies (one verdict per
        # file): the vtable's size field and the whole vtable lie in the buffer, at an even
        # offset; a vtable too short to hold a field slot has no fields (every field absent); the
        # table size a vtable declares bounds nothing, each field is bounds-checked on its own.
        if vt < 0 or vt & 1 or vt + 2 > n:
            raise _Bad(f"{spec.name} table's vtable at manifest offset {vt} is out of bounds or misaligned", pos)
        vsize = _H.unpack_from(buf, vt)[0]
        if vsize & 1 or vt + vsize > n:
            raise _Bad(f"{spec.name} vtable size {vsize} is invalid or runs past the manifest", vt)
        nslots = max(0, (vsize - 4) // 2)
        offs = struct.unpack_from(f"<{nslots}H", buf, vt + 4) if nslots else ()
        present = []
        for i, (fname, kind, _) in enumerate(spec.fields):
            off = offs[i] if i < nslots else 0
            if not off:
                continue
            code = "I" if _is_offset(kind) else _SCALARS[kind]
            size = _SIZES[code]
            if off < 4:
                raise _Bad(f"field lies inside its {spec.name} table's vtable offset", vt + 4 + 2 * i, fname)
            if (mod8 + off) % _ALIGNS[code]:
                raise _Bad(f"field is misaligned for its {size}-byte type", vt + 4 + 2 * i, fname)
            present.append((off, i, code, kind))
        present.sort()
        fmt = "<"
        cur = 0
        for off, i, code, _ in present:
            if off < cur:
                raise _Bad(f"fields of a {spec.name} table overlap", vt, spec.fields[i][0])
            fmt += f"{off - cur}x" if off > cur else ""
            fmt += code
            cur = off + _SIZES[code]
        p = _DecPlan()
        p.struct = struct.Struct(fmt)
        where = {i: k for k, (_, i, _, _) in enumerate(present)}
        nraw = len(present)
        p.getter = _tuple_getter([where.get(i, nraw + i) for i in range(len(spec.fields))])
        rel = {i: off for off, i, _, _ in present}
        p.children = [(i, f, k, rel.get(i, 0)) for i, f, k in spec.children]
        p.size = max(4, cur)  # the table's own offset and its fields: what is read, bounds-checked below
        return p

    def table(self, pos: int, spec: _DecSpec) -> list:
        if pos & 3 or pos + 4 > self.n:
            raise _Bad(f"{spec.name} table at manifest offset {pos} is out of bounds or misaligned", pos)
        self.budget -= 1
        if self.budget < 0:
            raise _Bad("the buffer refers to more tables than it can hold (aliased offsets)", pos)
        if self.vdepth is not None:
            self.vdepth += 1
            if self.vdepth > self.max_depth:
                raise _Bad(f"tables are nested deeper than {self.max_depth} levels", pos)
        vt = pos - _I32.unpack_from(self.buf, pos)[0]
        key = (spec.name, vt, pos & 7)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self.plan(spec, vt, pos & 7, pos)
        if pos + plan.size > self.n:
            raise _Bad(f"{spec.name} table's fields ({plan.size} bytes) run past the manifest", pos)
        vals = list(plan.getter(plan.struct.unpack_from(self.buf, pos) + spec.defaults))
        for i in spec.bools:
            v = vals[i]
            if v is not None and v > 1:
                raise _Bad(f"boolean must be 0 or 1, found {v}", pos, spec.fields[i][0])
            vals[i] = bool(v)
        for i, fname, kind, rel in plan.children:
            if rel:
                try:
                    vals[i] = self.child(pos + rel, vals[i], kind)
                except _Bad as e:
                    e.parts.append(fname)
                    raise
            elif kind in _LIST_KINDS or kind[0] == "t":
                vals[i] = []
            else:
                vals[i] = _EMPTY.get(kind)
        if self.vdepth is not None:
            self.vdepth -= 1
        return vals

    # -- everything an offset can point to -----------------------------------

    def target(self, at: int, u: int, what: str) -> int:
        t = at + u
        if u == 0 or u >= 1 << 31 or t >= self.n:
            raise _Bad(f"offset {u} to the {what} points outside the manifest", at)
        return t

    def vec(self, at: int, u: int, elem: int, align: int = 4, what: str = "vector") -> tuple:
        t = self.target(at, u, what)
        if t & 3 or (t + 4) % align or t + 4 > self.n:
            raise _Bad(f"{what} at manifest offset {t} is misaligned or out of bounds", at)
        count = _U32.unpack_from(self.buf, t)[0]
        if t + 4 + count * elem > self.n:
            raise _Bad(f"{what} of {count} elements runs past the manifest", t)
        return t + 4, count

    def child(self, at: int, u: int, kind: str):
        buf = self.buf
        if kind == "str":
            s = self.strings.get(at + u)
            if s is not None:
                return s
            start, count = self.vec(at, u, 1, what="string")
            end = start + count
            if end >= self.n or buf[end] != 0:
                raise _Bad("string lacks its terminating zero byte", end)
            try:
                s = str(buf[start:end], "utf-8")
            except UnicodeDecodeError as e:
                raise _Bad(f"string is not valid UTF-8 ({e.reason})", start) from None
            self.strings[at + u] = s
            return s
        if kind == "bytes":
            start, count = self.vec(at, u, 1, what="byte vector")
            return buf[start:start + count]
        if kind == "ops":
            return self.ops(at, u)
        if kind == "union":
            return self.target(at, u, "op")
        if kind == "blob":
            pos = self.target(at, u, "Blob table")
            off, length, sha, chunk_length, chunk_sha = self.table(pos, _DEC["Blob"])
            return off, length, sha, pos, chunk_length, chunk_sha
        if kind.startswith("table:"):
            spec = _DEC[kind[6:]]
            if self.vdepth is not None:  # counted in table()
                return self.table(self.target(at, u, f"{spec.name} table"), spec)
            self.depth += 1
            if self.depth > self.max_depth:
                raise _Bad(f"tables are nested deeper than {self.max_depth} levels", at)
            self.table(self.target(at, u, f"{spec.name} table"), spec)
            self.depth -= 1
            return None
        if kind[0] == "t":
            spec = _DEC[kind[2:]]
            start, count = self.vec(at, u, 4, what=f"{spec.name} vector")
            out = []
            make = _MAKERS.get(spec.name, _discard if self.vdepth is None else _kept)
            for j, v in enumerate(struct.unpack_from(f"<{count}I", buf, start)):
                try:
                    p = self.target(start + 4 * j, v, f"{spec.name} table")
                    out.append(make(self, self.table(p, spec), p))
                except _Bad as e:
                    e.parts.append(f"[{j}]")
                    raise
            return out
        key = (kind, at + u)
        got = self.cache.get(key)
        if got is not None:
            return list(got) if isinstance(got, tuple) and kind in _LIST_KINDS else got
        if kind == "u32v" or kind == "i32v":
            start, count = self.vec(at, u, 4, what="vector")
            got = struct.unpack_from(f"<{count}{'I' if kind == 'u32v' else 'i'}", buf, start)
        elif kind == "i64v":
            start, count = self.vec(at, u, 8, 8, what="vector")
            got = struct.unpack_from(f"<{count}q", buf, start)
        elif kind == "params":
            start, count = self.vec(at, u, 16, what="LaunchParam vector")
            got = tuple(map(m.LaunchParam._make, struct.iter_unpack("<HHIII", buf[start:start + 16 * count])))
        elif kind == "relocs":
            start, count = self.vec(at, u, 24, 8, what="Relocation vector")
            got = []
            for j, (vbo, rid, roff, rkind, pad) in enumerate(struct.iter_unpack("<IiQB7s",
                                                                                  buf[start:start + 24 * count])):
                if pad != _ZERO7:
                    raise _Bad("struct padding must be zero", start + 24 * j + 17, f"[{j}]")
                got.append(m.Relocation(vbo, rid, roff, rkind))
            got = tuple(got)
        elif kind == "legacy":
            start, count = self.vec(at, u, 88, 8, what="LegacyArg vector")
            got = []
            for j, v in enumerate(_LEGACY.iter_unpack(buf[start:start + 88 * count])):
                if v[-1] != b"\0\0\0\0":
                    raise _Bad("struct padding must be zero", start + 88 * j + 84, f"[{j}]")
                if v[0] > 1:
                    raise _Bad(f"is_array must be 0 or 1, found {v[0]}", start + 88 * j, f"[{j}]")
                got.append(m.LegacyArg(v[0], v[1], v[2], v[3], v[4], tuple(v[5:9]), tuple(v[9:13]), v[13]))
            got = tuple(got)
        else:  # pragma: no cover
            raise AssertionError(kind)
        self.cache[key] = got
        return list(got) if kind in _LIST_KINDS else got

    def ops(self, at: int, u: int) -> list:
        start, count = self.vec(at, u, 4, what="Operation vector")
        self.depth += 1
        if self.depth > self.max_depth + 1:  # the top-level list is depth 1
            raise _Bad(f"IF/WHILE bodies are nested deeper than {self.max_depth} levels", at)
        self.op_refs -= count
        if self.op_refs < 0:
            raise _Bad(f"the operation lists hold more than {self.n // 4 + 1} entries in all (a quarter of the "
                       "manifest's size; a body shared by several IF/WHILE ops counts each time): tables or "
                       "vectors are referenced over and over", at)
        out = []
        op_spec = _DEC["Operation"]
        for j, v in enumerate(struct.unpack_from(f"<{count}I", self.buf, start)):
            try:
                p = self.target(start + 4 * j, v, "Operation table")
                op = self.op_objects.get(p)
                if op is not None:
                    out.append(op)
                    continue
                t, where = self.table(p, op_spec)
                cls = m.OP_CLASSES.get(t)
                if cls is None:
                    what = "reserved by Warp (MEMCPY_D2H)" if t == OpType.MEMCPY_D2H else (
                        "NONE" if t == 0 else "unknown")
                    raise _Bad(f"op type {t} is {what}", p, "op_type")
                if where is None:
                    raise _Bad(f"op of type {OpType(t).name} has no table", p, "op")
                spec = _DEC[OP_TABLES[t]]
                vals = self.table(where, spec)
                op = _OP_MAKERS.get(t, _make_op)(cls, vals, where)
                if t != OpType.IF and t != OpType.WHILE:  # a body's nesting depth depends on where it is
                    self.op_objects[p] = op
                out.append(op)
            except _Bad as e:
                e.parts.append(f"[{j}]")
                raise
        self.depth -= 1
        return out


# -- model construction, one function per table ------------------------------

def _blob(rd: _Reader, obj, attr: str, ref, name: str) -> None:
    """Note a blob; ``obj.attr`` gets its view of the file once the blob area is checked."""
    if ref is not None:
        off, length, sha, pos, chunk_length, chunk_sha = ref
        rd.blobs.append((obj, attr, name, off, length, bytes(sha), pos, chunk_length, bytes(chunk_sha or b"")))


def _make_module(rd: _Reader, v: list, pos: int) -> m.Module:
    recipe = m.CudaCompileRecipe(*v[9]) if v[9] is not None else m.CudaCompileRecipe()
    mod = m.Module(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], recipe)
    if v[11] is not None and not v[5]:
        raise _Bad("module carries a source blob but has no source_filename", pos, "source")
    _blob(rd, mod, "binary", v[10], f"module {v[2]}")
    _blob(rd, mod, "source", v[11], f"module source {v[5]}")
    return mod


def _make_region(rd: _Reader, v: list, pos: int) -> m.Region:
    rid, esize, size, has, data = v
    if has != (data is not None):
        raise _Bad(f"region {rid} has_initial_data is {has} but its data blob is "
                   f"{'present' if data is not None else 'absent'}", pos, "data")
    if data is not None and data[1] != size:
        raise _Bad(f"region {rid} data blob is {data[1]} bytes, the region {size}", data[3], "data")
    r = m.Region(rid, esize, size, has)
    _blob(rd, r, "data", data, f"region {rid} initial data")
    return r


def _make_kernel(rd, v, pos):
    return m.Kernel(*v)


def _make_binding(rd, v, pos):
    return m.Binding(*v)


def _make_mesh(rd, v, pos):
    return m.Mesh(*v)


def _make_ptrloc(rd, v, pos):
    return m.PointerLocation(*v)


def _discard(rd, v, pos):
    return None


def _kept(rd, v, pos):
    return v


_MAKERS = {"Module": _make_module, "Region": _make_region, "Kernel": _make_kernel, "Binding": _make_binding,
           "Mesh": _make_mesh, "PointerLocation": _make_ptrloc}


def _make_op(cls, v, pos):
    return cls(*v, at=pos)


def _make_launch(cls, v, pos):
    if len(v[0]) != 4:
        raise _Bad(f"shape must have 4 entries, found {len(v[0])}", pos, "shape")
    v[0] = tuple(v[0])
    v[17] = list(v[17])
    if v[16] and (v[12] or v[13] or v[14] or len(v[15])):
        raise _Bad("a launch with format-3 argument descriptors has no params, relocations or value data", pos,
                   "legacy_args")
    if v[8]:
        if v[13]:
            raise _Bad("a forward launch must not have adjoint params", pos, "adjoint_params")
    elif len(v[13]) != len(v[12]):
        raise _Bad(f"an adjoint launch needs one adjoint param per param ({len(v[12])}), found {len(v[13])}",
                   pos, "adjoint_params")
    return cls(*v, at=pos)


def _make_memtile(cls, v, pos):
    if not len(v[3]):
        raise _Bad("MEMTILE value must not be empty", pos, "value")
    v[3] = bytes(v[3])
    return cls(*v, at=pos)


def _make_bsr_transpose(cls, v, pos):
    v[-1] = tuple(v[-1])
    return cls(*v, at=pos)


_OP_MAKERS = {OpType.KERNEL_LAUNCH: _make_launch, OpType.MEMTILE: _make_memtile,
              OpType.BSR_TRANSPOSE: _make_bsr_transpose}


def _fail(e: _Bad, base: int, cls=WrpFormatError, root: str = "manifest"):
    path = ""
    for part in reversed(e.parts):
        path += part if part.startswith("[") or not path else "." + part
    hint = ("The bundle is corrupted or was not written by a conforming writer." if root == "manifest" else
            "The annotations are corrupted or were not written by wrpkit; recapture, or convert with wrpkit.")
    raise cls(e.message, field=f"{root}.{path}" if path else root, offset=base + e.pos, hint=hint) from None


def decode_wrpk(data, *, verify_checksums: bool = True, max_depth: int = MAX_DEPTH,
                deferred: Optional[list] = None, thorough: bool = False) -> m.Program:
    """Decode a ``.wrpk`` file's bytes into a :class:`~wrpkit.model.Program`.

    Every header field, the manifest's SHA-256, the whole FlatBuffer (every
    offset, length and alignment), the blob area's layout and zero padding
    and, unless ``verify_checksums`` is False, every blob's SHA-256 are
    checked before the program is returned.

    Args:
        data: The whole file (``bytes``, ``mmap``, ``memoryview``...).  Blob
            fields of the result (``Region.data``, ``Module.binary``,
            ``Module.source``) and launch value data are zero-copy views of it.
        verify_checksums: Verify every blob's SHA-256 (default).  False
            skips only those hashes, for trusted files where speed matters;
            the header and manifest are always verified.
        max_depth: Deepest IF/WHILE nesting accepted.
        deferred: A list, for a loader that copies region data anyway:
            region-data blobs that no mesh reads are then not hashed here;
            a :class:`DeferredChecksum` for each is appended instead, and
            the caller must verify them (on its copy, which also closes the
            window in which the file could change) before it uses the
            program.  Module blobs, and regions meshes read, are always
            verified here, before any code can load.
        thorough: Also verify the whole-blob SHA-256 of a blob that has chunk
            digests (``wrp validate``: a file then passes only if every reader,
            one that knows no chunk digests included, accepts it).  Without it,
            such a blob is checked by its chunks alone, as the C++ reader does:
            they cover every byte, so each byte is hashed once.

    Operations that share one table in the manifest (wrpkit's writer shares
    identical ops) decode into one shared object: treat decoded programs as
    read-only, or copy an op before changing it.

    Raises:
        WrpIntegrityError: The manifest's or a blob's SHA-256 does not match;
            the message names the blob (e.g. "region 3 initial data").
        WrpVersionError: Another container version, or an APIC format
            version this wrpkit does not read.
        WrpFormatError: Anything else malformed, naming the field and byte.
    """
    buf = as_bytes_view(data)
    h = read_header(buf)
    msize, boff, bsize, msha = h.manifest_size, h.blob_area_offset, h.blob_area_size, h.manifest_sha256
    mend = HEADER_SIZE + msize
    if any(buf[mend:boff]):
        raise WrpFormatError("padding after the manifest must be zero", field="manifest_padding", offset=mend)
    manifest = buf[HEADER_SIZE:mend]
    if hashlib.sha256(manifest).digest() != msha:
        raise WrpIntegrityError("SHA-256 of the manifest does not match the header: the bundle was altered or "
                                "corrupted", field="manifest", offset=HEADER_SIZE,
                                hint="Rebuild the bundle from the original capture.")
    if bytes(manifest[4:8]) != FILE_IDENTIFIER:
        raise WrpFormatError(f"FlatBuffer identifier is {bytes(manifest[4:8])!r}, expected {FILE_IDENTIFIER!r}",
                             field="manifest.file_identifier", offset=HEADER_SIZE + 4)

    rd = _Reader(manifest, max_depth)
    try:
        root = rd.target(0, _U32.unpack_from(manifest, 0)[0], "Program table")
        prog = _make_program(rd, rd.table(root, _DEC["Program"]), root)
    except _Bad as e:
        _fail(e, HEADER_SIZE)
    except (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError) as e:
        # Defence in depth: every read above is bounds-checked first.
        raise WrpFormatError(f"malformed manifest ({type(e).__name__}: {e})", field="manifest",
                             offset=HEADER_SIZE) from None
    _check_expansion(prog, msize)
    check_blobs(rd, prog, buf, boff, bsize, verify_checksums, deferred, h.container_version, thorough)
    return prog


def _check_expansion(prog: m.Program, manifest_size: int) -> None:
    """Refuse a manifest whose shared tables would expand into huge WRP1 records.

    A FlatBuffer may reference one table or vector from many places, so a
    small manifest can describe an enormous program.  The records (metadata
    and ops, not region data) may be at most :data:`EXPANSION_FLOOR` plus
    :data:`EXPANSION_FACTOR` times the manifest's size, the limit
    wrp-replay applies too.
    """
    from ..wrp1_encode import metadata_section_size, ops_section_size  # noqa: PLC0415
    from ..wrp1_layout import LAYOUTS  # noqa: PLC0415

    layout = LAYOUTS.get(prog.format_version)
    if layout is None:  # an unsupported version is reported when it is used
        return
    limit = EXPANSION_FLOOR + EXPANSION_FACTOR * manifest_size
    size = metadata_section_size(prog, layout) + ops_section_size(prog, layout)
    if size > limit:
        raise WrpFormatError(f"the program's records would take {size} bytes as WRP1, more than {limit} "
                             f"(64 MiB + {EXPANSION_FACTOR} times the manifest's size): tables or vectors are "
                             "referenced over and over", field="manifest", offset=HEADER_SIZE,
                             hint="The bundle was not written by wrpkit or was crafted; do not load it.")


def _make_program(rd: _Reader, v: list, pos: int) -> m.Program:
    (fmt, warp_version, device_type, target_arch, modules, kernels, bindings, meshes, ptrs, regions, ops,
     annotations) = v
    from ..wrp1_layout import LAYOUTS  # noqa: PLC0415

    if fmt not in LAYOUTS:
        raise WrpVersionError(f"APIC format version {fmt} is not supported (this wrpkit reads {sorted(LAYOUTS)})",
                              field="manifest.format_version",
                              hint="Recapture the graph with Warp 1.19.0, which writes format 18.")
    if device_type not in (0, 1):
        raise _Bad(f"device type must be 0 (CUDA) or 1 (CPU), found {device_type}", pos, "device_type")
    if (device_type == m.DeviceType.CPU) != (target_arch == 0) or target_arch > 0x7FFFFFFF:
        raise _Bad(f"target arch {target_arch} does not fit device type {m.DeviceType(device_type).name}",
                   pos, "target_arch")
    last = 0
    for i, r in enumerate(regions):
        if r.region_id <= last:
            raise _Bad(f"region id {r.region_id} is not above the previous id {last} (ids must be unique, "
                       f"ascending and >= 1)", pos, f"regions[{i}].region_id")
        last = r.region_id
    if len(annotations):
        try:
            _verify_nested(annotations, rd.max_depth)
        except _Bad as e:
            e.parts.append("annotations")
            e.message = f"the nested Annotations FlatBuffer is malformed: {e.message} (at byte {e.pos} of it)"
            e.pos = pos
            raise
    prog = m.Program(fmt, warp_version, device_type, target_arch, modules, kernels, bindings, meshes, ptrs,
                     regions, ops, bytes(annotations))
    # The strings a .wrp's decoder checks, held to the same rules (wrp-replay checks them on the
    # WRP1 image it builds from a bundle): one verdict for a bundle in both routes.
    from ..wrp1_limits import check_strings  # noqa: PLC0415

    check_strings(prog)
    return prog


def _verify_nested(data, max_depth: int) -> list:
    # As wrp-replay's flatbuffers::Verifier (annotations.cpp): tables nest at
    # most max_depth deep, root included, and at most len/4 + 1 tables are
    # visited, so shared tables cannot make a small buffer expensive to read.
    buf = memoryview(data)
    rd = _Reader(buf, max_depth, verifier_depth=True)
    if len(buf) < 8:
        raise _Bad(f"{len(buf)} bytes are too few for a FlatBuffer", 0)
    return rd.table(rd.target(0, _U32.unpack_from(buf, 0)[0], "Annotations table"), _DEC["Annotations"])


def verify_annotations(data, max_depth: int = MAX_DEPTH) -> None:
    """Check that ``data`` is a well-formed ``Annotations`` FlatBuffer, as the C++ verifier would.

    Raises:
        WrpFormatError: It is not; the message names the field.
    """
    annotation_tables(data, max_depth)


def annotation_tables(data, max_depth: int = MAX_DEPTH) -> list:
    """Verify an ``Annotations`` FlatBuffer as :func:`verify_annotations` does, and return its fields.

    One pass, with no FlatBuffers runtime (which imports numpy: a tenth of a
    second or more at start-up).  Each table comes back as a list of its
    field values in the order of :data:`~.schema_tables.TABLES` (the schema's),
    nested tables and vectors of tables alike; an absent field is its default
    (``""``, ``()``, ``[]``, ``None`` for a table).

    Raises:
        WrpFormatError: The buffer is malformed; the message names the field.
    """
    try:
        return _verify_nested(data, max_depth)
    except _Bad as e:
        _fail(e, 0, root="annotations")
        raise AssertionError from None  # pragma: no cover
    except (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError) as e:
        raise WrpFormatError(f"malformed Annotations FlatBuffer ({type(e).__name__}: {e})") from None


__all__ = ["decode_wrpk", "verify_annotations", "annotation_tables"]
