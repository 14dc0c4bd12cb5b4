"""Writing ``.wrpk`` bundles: a back-to-front FlatBuffer builder specialised
for the schema in :mod:`.tables`, the blob layout, and the streaming writer.

One ``struct`` call per table, layouts cached per vtable, identical strings,
vectors and ops shared.  Large data is never copied: encoding yields region
data and module binaries as the caller's buffers, in slices of at most
:data:`~.tables.CHUNK` bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from operator import ne
from typing import Iterator, Mapping, Optional

from ... import model as m
from ...errors import WrpFormatError, WrpModuleError
from ...apic_types import OpType
from .blobs import as_bytes_view, chunk_spans, sha256_digest
from .reader import verify_annotations
from .tables import (_LEGACY, _PARAM, _RELOC, _SCALARS, _SIZES, _U32, CHUNK, CONTAINER_VERSION, CONTAINER_VERSIONS,
                     DIGEST_CHUNK, MIN_DIGEST_CHUNK, MIN_DIGEST_CHUNKS, chunk_count,
                     FILE_IDENTIFIER, HEADER, HEADER_SIZE, MAGIC, MAX_MANIFEST, OP_TABLES, TABLES, _align, _is_offset,
                     _tuple_getter, memory_data_offsets, place_blob)

class _NotDefault:
    """A default that no value equals: such fields are always written."""

    def __ne__(self, other):
        return True

    def __eq__(self, other):
        return False

    __hash__ = object.__hash__


_ALWAYS = _NotDefault()


class _EncSpec:
    __slots__ = ("name", "fields", "defaults", "getter", "children", "plans", "unhashable")

    def __init__(self, name: str):
        self.name = name
        self.fields = TABLES[name]
        # Floats are always written so that -0.0 and NaN payloads survive.
        self.defaults = tuple(_ALWAYS if k == "f64" else (None if _is_offset(k) else d)
                              for _, k, d in self.fields)
        names = [f for f, _, _ in self.fields]
        self.getter = _tuple_getter(names, attr=True)
        self.children = [(i, k) for i, (_, k, _) in enumerate(self.fields) if _is_offset(k) and k != "blob"]
        self.plans: dict = {}
        # Fields whose model values are lists or byte views (see _frozen).
        self.unhashable = [i for i, (_, k, _) in enumerate(self.fields) if k in ("bytes", "params", "relocs", "legacy")
                           or k.endswith("v")]


_ENC = {name: _EncSpec(name) for name in TABLES}


class _Plan:
    """The byte layout of one table for one set of present fields."""

    __slots__ = ("struct", "order", "offsets", "size", "align", "vtable")

    def __init__(self, spec: _EncSpec, mask: tuple):
        present = []
        for i, ((_, kind, _), here) in enumerate(zip(spec.fields, mask)):
            if here:
                code = "I" if _is_offset(kind) else _SCALARS[kind]
                present.append((i, code, _is_offset(kind)))
        eights = [p for p in present if _SIZES[p[1]] == 8]
        fours = [p for p in present if _SIZES[p[1]] == 4]
        twos = [p for p in present if _SIZES[p[1]] == 2]
        ones = [p for p in present if _SIZES[p[1]] in (1, 7)]
        layout = []
        fmt = "<i"
        off = 4
        if eights:
            if fours:
                layout.append(fours.pop(0))
            else:
                fmt += "4x"
                off = 8
        layout += eights + fours + twos + ones
        slot_off = {}
        offsets = []
        for k, (i, code, is_off) in enumerate(layout):
            slot_off[i] = off
            if is_off:
                offsets.append((k, off))
            fmt += code
            off += _SIZES[code]
        self.struct = struct.Struct(fmt)
        assert self.struct.size == off
        self.order = _tuple_getter([i for i, _, _ in layout])
        self.offsets = offsets
        self.size = off
        self.align = 8 if eights else 4
        nslots = max(slot_off) + 1 if slot_off else 0
        self.vtable = struct.pack(f"<HH{nslots}H", 4 + 2 * nslots, off,
                                  *(slot_off.get(s, 0) for s in range(nslots)))


class _Builder:
    """Builds a FlatBuffer from the end towards the start, like flatc's builders.

    Objects are kept as chunks in writing order; the buffer is their reverse.
    A position is an object's distance from the end of the buffer ("E"), which
    does not change as more is written before it; alignment of E equals
    alignment of the final absolute position because the finished buffer's
    size is a multiple of 8.
    """

    def __init__(self):
        self.chunks: list = []
        self.size = 0
        self.shared: dict = {}
        self.vtables: dict = {}

    def place(self, data, align: int, rem: int = 0) -> int:
        """Write ``data`` so that its start E is ``rem`` modulo ``align``; return that E."""
        size = self.size + len(data)
        pad = (rem - size) % align
        if pad:
            self.chunks.append(bytes(pad))
        self.chunks.append(data)
        self.size = size + pad
        return self.size

    def vector(self, key, count: int, payload: bytes, align8: bool = False, share: bool = True) -> int:
        """Write ``[u32 count][payload]`` (shared with an identical earlier vector)."""
        if share:
            e = self.shared.get(key)
            if e is not None:
                return e
        e = self.place(_U32.pack(count) + payload, 8 if align8 else 4, 4 if align8 else 0)
        if share:
            self.shared[key] = e
        return e

    def string(self, s: str) -> Optional[int]:
        if not s:
            return None
        e = self.shared.get(s)
        if e is None:
            b = s.encode("utf-8")
            e = self.place(_U32.pack(len(b)) + b + b"\0", 4)
            self.shared[s] = e
        return e

    def bytes_vec(self, data) -> Optional[int]:
        if data is None:
            return None
        b = bytes(data)
        if not b:
            return None
        return self.vector(("b", b), len(b), b)

    def table(self, spec: _EncSpec, vals: list) -> int:
        """Write one table whose field values (child offsets already as E) are ``vals``."""
        mask = tuple(map(ne, vals, spec.defaults))
        plan = spec.plans.get(mask)
        if plan is None:
            plan = spec.plans[mask] = _Plan(spec, mask)
        size = self.size + plan.size
        pad = (-size) % plan.align
        e = size + pad
        ordered = list(plan.order(vals))
        for k, rel in plan.offsets:
            ordered[k] = e - rel - ordered[k]
        vt = plan.vtable
        vpos = self.vtables.get(vt)
        soff = len(vt) if vpos is None else vpos - e
        try:
            data = plan.struct.pack(soff, *ordered)
        except struct.error as exc:
            bad = [f"{spec.fields[i][0]}={vals[i]!r}" for i in range(len(vals))]
            raise WrpFormatError(f"cannot encode a {spec.name} record ({exc}): {', '.join(bad)}") from None
        if pad:
            self.chunks.append(bytes(pad))
        self.chunks.append(data)
        self.size = e
        if vpos is None:
            self.chunks.append(vt)
            self.size = e + len(vt)
            self.vtables[vt] = self.size
        return e

    def finish(self, root: int) -> bytes:
        size = self.size + 8
        pad = (-size) % 8
        e = size + pad
        if pad:
            self.chunks.append(bytes(pad))
        self.chunks.append(_U32.pack(e - root) + FILE_IDENTIFIER)
        self.size = e
        out = b"".join(reversed(self.chunks))
        assert len(out) == e
        return out


def _frozen(v):
    """A hashable stand-in for one field value (lists and byte views compare by content)."""
    if isinstance(v, list):
        return tuple(v)
    if isinstance(v, (memoryview, bytearray)):
        return bytes(v)
    return v


class _Encoder:
    """Writes the model's tables into a :class:`_Builder`."""

    def __init__(self):
        self.b = _Builder()
        self.op_tables: dict = {}  # op content -> E of its shared Operation table
        # id(op) -> E, for op objects listed many times (a shared decode);
        # the program holds every op alive while it is encoded.
        self.op_ids: dict = {}
        # (E of a Blob's sha256 or chunk_sha256 vector, blob offset, whether chunk digests):
        # where write_wrpk patches digests in.
        self.sha_slots: list = []

    def blob(self, ref) -> Optional[int]:
        if ref is None:
            return None
        # (offset, length, sha256[, chunk_length, chunk_sha256]): without chunk fields, none.
        off, length, sha = ref[:3]
        chunk_length, chunk_sha = ref[3:5] or (0, b"")
        sha_e = self.b.vector(None, len(sha), sha, share=False) if length else None
        chunks_e = self.b.vector(None, len(chunk_sha), chunk_sha, share=False) if chunk_sha else None
        if length:
            self.sha_slots.append((sha_e, off, False))
        if chunks_e is not None:
            self.sha_slots.append((chunks_e, off, True))
        return self.b.table(_ENC["Blob"], [off, length, sha_e, chunk_length, chunks_e])

    def child(self, kind: str, v):
        b = self.b
        if kind == "str":
            return b.string(v)
        if kind == "bytes":
            return b.bytes_vec(v)
        if kind == "ops":
            return self.ops(v)
        if not v:
            return None
        if kind == "u32v":
            return b.vector(("I", tuple(v)), len(v), struct.pack(f"<{len(v)}I", *v))
        if kind == "i32v":
            return b.vector(("i", tuple(v)), len(v), struct.pack(f"<{len(v)}i", *v))
        if kind == "params":
            key = ("p", tuple(v))
            e = b.shared.get(key)
            if e is None:
                payload = b"".join([_PARAM.pack(*p) for p in v])
                e = b.vector(key, len(v), payload)
            return e
        if kind == "relocs":
            key = ("r", tuple(v))
            e = b.shared.get(key)
            if e is None:
                payload = b"".join([_RELOC.pack(r[0], r[1], r[2], r[3], b"") for r in v])
                e = b.vector(key, len(v), payload, align8=True)
            return e
        if kind == "legacy":
            key = ("l", tuple(v))
            e = b.shared.get(key)
            if e is None:
                payload = b"".join([_LEGACY.pack(a[0], a[1], a[2], a[3], a[4], *a[5], *a[6], a[7], b"") for a in v])
                e = b.vector(key, len(v), payload, align8=True)
            return e
        raise AssertionError(kind)

    def annotations(self, data) -> Optional[int]:
        """The nested Annotations FlatBuffer, its first byte 8-aligned so that it can be read in place."""
        if not data:
            return None
        b = bytes(data)
        return self.b.vector(None, len(b), b, align8=True, share=False)

    def offsets_vector(self, es: list) -> Optional[int]:
        """A vector of uoffsets to the tables at E positions ``es``."""
        if not es:
            return None
        n = len(es)
        size = self.b.size + 4 + 4 * n
        e = size + (-size) % 4
        # Element j sits at E = e - 4 - 4j.
        payload = struct.pack(f"<{n}I", *[e - 4 - 4 * j - t for j, t in enumerate(es)])
        got = self.b.place(_U32.pack(n) + payload, 4)
        assert got == e
        return e

    def generic(self, spec: _EncSpec, obj) -> int:
        vals = list(spec.getter(obj))
        for i, kind in spec.children:
            vals[i] = self.child(kind, vals[i])
        return self.b.table(spec, vals)

    def ops(self, ops) -> Optional[int]:
        if not ops:
            return None
        op_spec = _ENC["Operation"]
        memo, ids = self.op_tables, self.op_ids
        es = []
        for op in ops:
            e_op = ids.get(id(op))
            if e_op is not None:
                es.append(e_op)
                continue
            t = op.op_type
            name = OP_TABLES.get(t)
            if name is None or t == OpType.MEMCPY_D2H:
                raise WrpFormatError(f"cannot encode op type {t}")
            spec = _ENC[name]
            # A step loop records the same launch many times: identical ops
            # (bodies excepted) share one Operation table, which readers
            # decode once.  Keys hold every field the table stores.
            key = e_op = None
            if t != OpType.IF and t != OpType.WHILE:
                key = list(spec.getter(op))
                for i in spec.unhashable:
                    key[i] = _frozen(key[i])
                key = (t, *key)
                try:
                    e_op = memo.get(key)
                except TypeError:  # a field value that cannot be hashed: do not share
                    key = None
            if e_op is None:
                if t == OpType.KERNEL_LAUNCH and len(op.shape) != 4:
                    raise WrpFormatError(f"KERNEL_LAUNCH shape must have 4 entries, found {len(op.shape)}")
                e_op = self.b.table(op_spec, [int(t), self.generic(spec, op)])
                if key is not None:
                    memo[key] = e_op
            if t != OpType.IF and t != OpType.WHILE:
                ids[id(op)] = e_op
            es.append(e_op)
        return self.offsets_vector(es)

    def program(self, prog: m.Program, module_refs: list, region_refs: list) -> bytes:
        es = {}
        mods = []
        spec = _ENC["Module"]
        for mod, (bref, sref) in zip(prog.modules, module_refs):
            r = mod.recipe
            recipe = bytes((r.debug, r.optimization_level, r.verify_fp, r.fast_math, r.fuse_fp, r.lineinfo,
                            r.arch_suffix))
            vals = [self.b.string(mod.module_hash), self.b.string(mod.module_name),
                    self.b.string(mod.binary_filename), mod.target_arch, self.b.string(mod.binary_digest),
                    self.b.string(mod.source_filename), self.b.string(mod.source_digest), mod.binary_kind,
                    mod.fallback_reason, recipe, self.blob(bref), self.blob(sref)]
            mods.append(self.b.table(spec, vals))
        es["modules"] = self.offsets_vector(mods)
        for key, table in (("kernels", "Kernel"), ("bindings", "Binding"), ("meshes", "Mesh"),
                           ("pointer_locations", "PointerLocation")):
            spec = _ENC[table]
            es[key] = self.offsets_vector([self.generic(spec, x) for x in getattr(prog, key)])
        spec = _ENC["Region"]
        regs = []
        for r, ref in zip(prog.regions, region_refs):
            regs.append(self.b.table(spec, [r.region_id, r.element_size, r.size, r.has_initial_data,
                                            self.blob(ref)]))
        es["regions"] = self.offsets_vector(regs)
        es["ops"] = self.ops(prog.ops)
        vals = [prog.format_version, self.b.string(prog.warp_version), prog.device_type, prog.target_arch,
                es["modules"], es["kernels"], es["bindings"], es["meshes"], es["pointer_locations"],
                es["regions"], es["ops"], self.annotations(prog.annotations)]
        root = self.b.table(_ENC["Program"], vals)
        return self.b.finish(root)


def _nbytes(data) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)


class _Layout:
    """Where every blob of a program goes in the blob area."""

    def __init__(self, prog: m.Program, modules: Optional[Mapping], hashes: bool = True,
                 version: int = CONTAINER_VERSION, digest_chunk: int = DIGEST_CHUNK):
        self.items = []  # (data, offset, length) in file order
        self.chunked = {}  # offset -> chunk_length, for the blobs given chunk digests
        self.region_refs = []
        self.module_refs = []
        self.end = 0
        self.version = version
        memory_offsets = memory_data_offsets(prog.regions)

        def add(data, memory_offset=None):
            n = _nbytes(data)
            if n == 0:
                return (0, 0, b"", 0, b"")
            off = place_blob(self.end, n, memory_offset, version)
            sha = hashlib.sha256(data).digest() if hashes else bytes(32)
            chunk_length, chunk_sha = 0, b""
            if digest_chunk and n >= MIN_DIGEST_CHUNKS * digest_chunk:
                chunk_length = self.chunked[off] = digest_chunk
                chunk_sha = b"".join(chunk_digests(data, digest_chunk)) if hashes else \
                    bytes(32 * chunk_count(n, digest_chunk))
            self.items.append((data, off, n))
            self.end = off + n
            return (off, n, sha, chunk_length, chunk_sha)

        for r in prog.regions:
            if r.has_initial_data:
                if r.data is None or _nbytes(r.data) != r.size:
                    got = 0 if r.data is None else _nbytes(r.data)
                    raise WrpFormatError(f"region {r.region_id} is marked as having initial data but carries "
                                         f"{got} of its {r.size} bytes")
                self.region_refs.append(add(r.data, memory_offsets.get(r.region_id)))
            else:
                self.region_refs.append(None)
        for mod in prog.modules:
            if modules is not None:
                binary = modules.get(mod.binary_filename)
                if binary is None:
                    raise WrpModuleError(f"module file {mod.binary_filename!r} (module {mod.module_name}) was "
                                         f"not given", hint="Pass every file of <stem>_modules/ the graph names.")
                source = None
                if mod.source_filename:
                    source = modules.get(mod.source_filename)
                    if source is None:
                        raise WrpModuleError(f"module source file {mod.source_filename!r} was not given")
            else:
                binary, source = mod.binary, (mod.source if mod.source_filename else None)
            self.module_refs.append((None if binary is None else add(binary),
                                     None if source is None else add(source)))


def _manifest(prog: m.Program, layout: _Layout, slots: Optional[list] = None) -> bytes:
    """The manifest; ``slots`` (a list) receives ``(byte offset in the manifest, blob offset,
    whether chunk digests)`` of every blob's SHA-256 and chunk digests, for digests filled in later."""
    if prog.annotations:
        try:
            verify_annotations(prog.annotations)
        except WrpFormatError as e:
            raise WrpFormatError(f"the program's annotations are not a valid Annotations FlatBuffer: {e}",
                                 hint="Drop or rewrite the annotations (wrpkit.formats.annotations).") from None
    enc = _Encoder()
    manifest = enc.program(prog, layout.module_refs, layout.region_refs)
    if len(manifest) > MAX_MANIFEST:
        raise WrpFormatError(f"the manifest would be {len(manifest)} bytes, above the FlatBuffers limit of 2 GiB")
    if slots is not None:
        # A vector at E starts len(manifest) - E bytes in; its payload follows the count word.
        slots.extend((len(manifest) - e + 4, off, chunks) for e, off, chunks in enc.sha_slots)
    return manifest


def _header(manifest: bytes, blob_area_size: int, version: int = CONTAINER_VERSION) -> bytes:
    boff = _align(HEADER_SIZE + len(manifest))
    return HEADER.pack(MAGIC, version, 0, HEADER_SIZE, len(manifest), boff, blob_area_size,
                       hashlib.sha256(manifest).digest(), bytes(48))


def _check_version(version: int) -> int:
    if version not in CONTAINER_VERSIONS:
        raise WrpFormatError(f"container version {version} cannot be written (this wrpkit writes "
                             f"{', '.join(map(str, CONTAINER_VERSIONS))})")
    return version


def _check_digest_chunk(digest_chunk: int) -> int:
    if digest_chunk and (digest_chunk & (digest_chunk - 1) or digest_chunk < MIN_DIGEST_CHUNK):
        raise WrpFormatError(f"digest chunk {digest_chunk} must be 0 or a power of two of at least "
                             f"{MIN_DIGEST_CHUNK} bytes")
    return digest_chunk


def chunk_digests(data, chunk_length: int) -> list:
    """The SHA-256 of each consecutive ``chunk_length``-byte chunk of ``data`` (the last shorter)."""
    return [sha256_digest(view) for view in _chunk_views(data, chunk_length)]


def _chunk_views(data, chunk_length: int) -> list:
    """``data`` as flat byte views of consecutive ``chunk_length``-byte chunks (the last shorter)."""
    view = as_bytes_view(data)
    return [view[b:e] for b, e in chunk_spans(len(view), chunk_length)]


def iter_wrpk_chunks(program: m.Program, modules: Optional[Mapping] = None, *,
                     container_version: int = CONTAINER_VERSION, digest_chunk: int = DIGEST_CHUNK) -> Iterator:
    """The bytes of the ``.wrpk`` encoding of ``program``, as an iterator of chunks.

    The manifest is built by this call (it holds every blob's SHA-256, so
    every blob is hashed once up front, and every error is raised here, before
    anything is written); blobs are then yielded as slices of the
    caller's buffers, never copied, so a file of any size (u64 offsets) can
    be written with constant extra memory.

    Args:
        program: The program.
        modules: ``{file name: bytes-like}`` holding every module binary the
            program names (and every exported ``.cu`` source), e.g.
            :meth:`wrpkit.formats.container.Capture.module_files`.  None: take them
            from ``Module.binary`` / ``Module.source`` (a module without
            them is bundled without them).
        container_version: 2 (default) places large region data so that a
            replay maps it from the file; 1 is the previous layout (every blob
            64-byte aligned), which every wrpkit reads.
        digest_chunk: Every blob of at least :data:`~.tables.MIN_DIGEST_CHUNKS`
            such chunks also records a SHA-256 per chunk of this many bytes
            (``Blob.chunk_sha256``), which lets a replay verify it on several
            cores; 0 writes none (the layout of bundles before chunk digests).

    Raises:
        WrpModuleError: ``modules`` lacks a file the program names.
        WrpFormatError: The program cannot be encoded (inconsistent region
            data, a value out of its field's range), or ``digest_chunk`` is
            not 0 or a power of two of at least 64 KiB.
    """
    layout = _Layout(program, modules, version=_check_version(container_version),
                     digest_chunk=_check_digest_chunk(digest_chunk))
    manifest = _manifest(program, layout)
    return _chunks(_header(manifest, layout.end, layout.version), manifest, layout)


def _chunks(header: bytes, manifest: bytes, layout: _Layout) -> Iterator:
    yield header
    yield manifest
    pos = HEADER_SIZE + len(manifest)
    base = _align(pos)
    if base > pos:
        yield bytes(base - pos)
    yield from _blob_chunks(layout)


def _blob_chunks(layout: _Layout) -> Iterator:
    """The blob area: every blob at its offset, zeros between."""
    pos = 0
    for data, off, n in layout.items:
        if off > pos:
            yield bytes(off - pos)
        view = data if isinstance(data, memoryview) else memoryview(data)
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        if n <= CHUNK:
            yield view
        else:
            for i in range(0, n, CHUNK):
                yield view[i:i + CHUNK]
        pos = off + n


def encode_wrpk(program: m.Program, modules: Optional[Mapping] = None, *,
                container_version: int = CONTAINER_VERSION, digest_chunk: int = DIGEST_CHUNK) -> bytes:
    """The whole ``.wrpk`` file as bytes (see :func:`iter_wrpk_chunks`)."""
    return b"".join(iter_wrpk_chunks(program, modules, container_version=container_version,
                                     digest_chunk=digest_chunk))


class _ChunkDigests:
    """The futures of one blob's chunk digests (:meth:`BlobHasher.start_chunks`)."""

    def __init__(self, futures: list):
        self._futures = futures

    def result(self) -> bytes:
        return b"".join(f.result() for f in self._futures)

    def cancel(self) -> None:
        for f in self._futures:
            f.cancel()


class BlobHasher:
    """SHA-256 digests of blobs, computed on worker threads (hashlib releases the GIL).

    A converter can :meth:`start` hashing a blob as soon as its bytes exist,
    before the rest of the program is decoded, and hand the hasher to
    :func:`write_wrpk`, which then waits only for what is still running.
    Blobs are known by object identity, so pass the same buffer objects the
    program holds.  Close it (or use ``with``) before the buffers go away.
    """

    def __init__(self):
        import os  # noqa: PLC0415
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

        self._pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="wrpkit-hash")
        self._jobs: dict = {}  # id(data) -> (data, future); data is held so that its id stays unique
        # (id(data), chunk_length) -> (data, futures of the chunk digests)
        self._chunk_jobs: dict = {}

    def start(self, data):
        """Start hashing ``data`` (no-op if it is already started); return its future digest."""
        job = self._jobs.get(id(data))
        if job is None:
            job = self._jobs[id(data)] = (data, self._pool.submit(sha256_digest, data))
        return job[1]

    def start_chunks(self, data, chunk_length: int) -> "_ChunkDigests":
        """Start hashing each ``chunk_length``-byte chunk of ``data`` as its own job (no-op if
        started); return an object whose ``result()`` is the concatenated chunk digests."""
        key = (id(data), chunk_length)
        job = self._chunk_jobs.get(key)
        if job is None:
            futures = [self._pool.submit(sha256_digest, view) for view in _chunk_views(data, chunk_length)]
            job = self._chunk_jobs[key] = (data, _ChunkDigests(futures))
        return job[1]

    def start_regions(self, regions) -> None:
        """Start hashing the initial data of ``regions``, largest first (for ``on_regions`` hooks)."""
        for r in sorted(regions, key=lambda r: -r.size):
            if r.has_initial_data and r.data is not None:
                self.start(r.data)

    def close(self) -> None:
        """Cancel what has not started and wait for what has."""
        for _, f in self._jobs.values():
            f.cancel()
        for _, chunks in self._chunk_jobs.values():
            chunks.cancel()
        self._pool.shutdown(wait=True)
        self._jobs.clear()
        self._chunk_jobs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_wrpk(path, program: m.Program, modules: Optional[Mapping] = None, progress=None, finish=None,
               hasher: Optional[BlobHasher] = None, durable: bool = True,
               container_version: int = CONTAINER_VERSION, digest_chunk: int = DIGEST_CHUNK) -> int:
    """Write a ``.wrpk`` atomically (see :func:`wrpkit.atomic_writes.atomic_write`).

    The file holds the bytes of :func:`iter_wrpk_chunks`, but the blobs are
    hashed on worker threads while they are written.

    Args:
        path: Destination.
        program, modules: As for :func:`iter_wrpk_chunks`.
        progress: Optional callable taking the number of bytes just written
            (blobs are written in pieces of at most :data:`CHUNK` bytes).
        finish: Optional check run before the file is published (see
            :func:`wrpkit.atomic_writes.atomic_write`); raise to abandon it.
        hasher: A :class:`BlobHasher` that may already be hashing some of
            the blobs; by default one is made for this call.
        durable: False skips the fsyncs (see :func:`wrpkit.atomic_writes.atomic_write`).
        container_version, digest_chunk: See :func:`iter_wrpk_chunks`.

    Returns:
        Bytes written.
    """
    import os  # noqa: PLC0415

    from ...atomic_writes import atomic_write, pwrite_all  # noqa: PLC0415

    # The bytes are those of iter_wrpk_chunks, written in another order: the
    # blob area first while worker threads hash the blobs, then the header
    # and manifest, whose digests were left zero and are filled in once the
    # hashes are done.
    layout = _Layout(program, modules, hashes=False, version=_check_version(container_version),
                     digest_chunk=_check_digest_chunk(digest_chunk))
    with contextlib.ExitStack() as stack:
        if hasher is None:
            hasher = stack.enter_context(BlobHasher())
        # Largest first, so that the longest hash starts at once, before the
        # manifest is even encoded.
        ordered = sorted(layout.items, key=lambda it: -it[2])
        digests = {off: hasher.start(data) for data, off, _ in ordered}
        # Chunk digests are separate jobs, so that they fill the workers beside the whole-blob hashes.
        chunk_digests_of = {off: hasher.start_chunks(data, layout.chunked[off]) for data, off, _ in ordered
                            if off in layout.chunked}

        def chunks():
            yield bytes(base)  # header and manifest: written by write_head()
            yield from _blob_chunks(layout)

        def write_head(fd: int) -> None:
            if durable:
                os.fsync(fd)  # the blobs go to disk while the last hashes finish
            final = bytearray(manifest)
            for at, off, chunks in slots:
                value = chunk_digests_of[off].result() if chunks else digests[off].result()
                final[at:at + len(value)] = value
            final = bytes(final)
            pwrite_all(fd, _header(final, layout.end, layout.version) + final, 0)
            if finish is not None:
                finish(fd)

        slots: list = []
        manifest = _manifest(program, layout, slots)
        base = _align(HEADER_SIZE + len(manifest))
        return atomic_write(path, chunks(), progress, write_head, durable=durable)


def bundle_size(program: m.Program, modules: Optional[Mapping] = None) -> int:
    """Size in bytes of the ``.wrpk`` of ``program``, computed without hashing or copying blobs."""
    layout = _Layout(program, modules, hashes=False)
    manifest = _manifest(program, layout)
    return _align(HEADER_SIZE + len(manifest)) + layout.end


def module_files(program: m.Program) -> dict:
    """``{file name: bytes-like}`` of the module binaries and sources a program carries
    (as decoded from a ``.wrpk`` or JSON); modules without them are left out."""
    out = {}
    for mod in program.modules:
        if mod.binary is not None:
            out[mod.binary_filename] = mod.binary
        if mod.source_filename and mod.source is not None:
            out[mod.source_filename] = mod.source
    return out


__all__ = ["iter_wrpk_chunks", "encode_wrpk", "write_wrpk", "BlobHasher", "bundle_size", "module_files",
           "chunk_digests"]
