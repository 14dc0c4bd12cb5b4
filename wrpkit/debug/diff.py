"""Compare two captures structurally (``wrp diff``).

Example::

    d = wrpkit.diff("v1.wrp", "v2.wrp")
    d.identical                      # False
    d.ops[0]                         # {"a": 3, "b": 3, "change": "changed", "kind": "KERNEL_LAUNCH",
                                     #  "kernel": "k_axpb", "fields": {"dim": {"a": [64], "b": [128]}}}

What is compared: versions and device; regions (sizes, initial-data
digests); bindings; kernels and modules; and the op streams, aligned with
:class:`difflib.SequenceMatcher` on each op's kind and kernel, then field by
field.  Bytes that hold pointers patched at load (kernel-argument
relocations, pointer locations in region data, mesh and BVH handles) are not
compared: the same program captured twice in two processes is identical.
Scalar kernel arguments are decoded through the kernel-argument annotations
where the file has them.  Nothing here imports Warp.
"""

from __future__ import annotations

import difflib
import hashlib
from typing import Optional

import numpy as np

from ..records import field, record
from .. import model as m
from ..checks.effects import kernel_name, launch_argument, launch_label
from ..errors import WrpValidationError
from ..formats import annotations as ann
from ..formats.launch_arrays import DescriptorLayoutError, argument_arrays, descriptor_view

# Op fields that hold process-specific handles (never compared).
_HANDLE_FIELDS = {"bvh_id", "grid_id", "at"}


@record
class DiffResult:
    """The differences between captures ``a`` and ``b``.

    Attributes:
        identical: No differences at all.
        header: ``{field: {"a": .., "b": ..}}`` for versions, device, arch.
        regions, bindings, kernels, modules: Lists of ``{"key"/name...,
            "change": "added"|"removed"|"changed", "fields": {...}}``.
        ops: ``[{"a": index or None, "b": index or None, "change": ...,
            "kind": op kind, "kernel": key or None, "fields": {...}}]``
            over top-level ops; changes inside IF/WHILE bodies are under the
            body's name in ``fields`` (as a list of the same shape).  When
            either capture records call sites (``wrpkit.capture``), each row
            also has ``source``: ``{"a": .., "b": ..}``, where each program
            issued the op (``{"file", "line", "function", "stack"}`` or None).
    """

    a: str
    b: str
    header: dict = field(default_factory=dict)
    regions: list = field(default_factory=list)
    bindings: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    modules: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    op_counts: dict = field(default_factory=dict)
    #: Kernels present in both whose own code differs: ``{"kernel", "change": "code changed",
    #: "hash": {"a", "b"}, "function_bytes": "same"|"differ"|None}``.
    code: list = field(default_factory=list)
    #: Regions whose initial data differs but which an op overwrites before any op reads them:
    #: ``{"region", "overwritten_by": {"a", "b"}}`` (not differences).
    overwritten: list = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not (self.header or self.regions or self.bindings or self.kernels or self.modules or self.ops
                    or self.code)

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, "identical": self.identical, "header": self.header,
                "code": self.code, "regions": self.regions, "bindings": self.bindings, "kernels": self.kernels,
                "modules": self.modules, "ops": self.ops, "op_counts": self.op_counts,
                "overwritten_before_read": self.overwritten}


def _open(source):
    from ..checks.validate import validate_program  # noqa: PLC0415
    from ..formats.container import open_capture  # noqa: PLC0415

    cap = open_capture(source)
    problems = [p for p in validate_program(cap.program) if getattr(p, "severity", "error") == "error"]
    if problems:
        raise WrpValidationError([f"{source}: {p}" for p in problems],
                                 hint="Run `wrp validate` on the file for the full list.")
    return cap


def diff(a, b, kernels=()) -> DiffResult:
    """Compare two captures (paths to ``.wrp`` or ``.wrpk`` files).

    Args:
        a, b: The captures.
        kernels: ``.py`` files defining their kernels (``--kernels``): a stock capture's scalar
            arguments are then compared as the numbers they are, not as bytes.

    Returns:
        A :class:`DiffResult`.

    Raises:
        WrpFormatError, WrpValidationError: Either file is invalid.
        WrpKernelsError: (``kernels``) A file fails to import, or none of its kernels matches.
    """
    with _open(a) as ca, _open(b) as cb:
        if kernels:
            from ..run.capture.source_types import type_program  # noqa: PLC0415  (imports the user's kernels)

            for cap in (ca, cb):
                type_program(cap.program, list(kernels))
        return diff_programs(ca.program, cb.program, str(a), str(b), _module_reader(ca), _module_reader(cb))


def _module_reader(cap):
    def read(name: str):
        try:
            return cap.module_bytes(name)
        except Exception:  # noqa: BLE001  (a missing module file only loses the function-bytes comparison)
            return None

    return read


def diff_programs(pa: m.Program, pb: m.Program, name_a: str = "a", name_b: str = "b", modules_a=None,
                  modules_b=None) -> DiffResult:
    """Compare two programs in wrpkit's model (see :func:`diff`).

    ``modules_a``/``modules_b``: ``read(binary_filename) -> bytes or None``, to
    compare each kernel's function bytes in its module object.
    """
    res = DiffResult(name_a, name_b)
    for f in ("format_version", "warp_version", "device", "target_arch"):
        va, vb = getattr(pa, f), getattr(pb, f)
        if va != vb:
            res.header[f] = {"a": va, "b": vb}
    ctx = _Context(pa, pb)
    regions = _keyed(
        "region", {r.region_id: r for r in pa.regions}, {r.region_id: r for r in pb.regions},
        lambda ra, rb: _fields(("size", "element_size", "has_initial_data"), ra, rb)
        | _pair("data_sha256", ctx.region_digest(pa, ra), ctx.region_digest(pb, rb)))
    first_a, first_b = _first_touch(pa, ctx.ann_a), _first_touch(pb, ctx.ann_b)
    for row in regions:
        rid = row["region"]
        only_data = row["change"] == "changed" and set(row["fields"]) <= {"data_sha256", "has_initial_data"}
        wa, wb = first_a.get(rid), first_b.get(rid)
        if only_data and wa is not None and wb is not None:
            res.overwritten.append({"region": rid, "overwritten_by": {"a": wa, "b": wb}})
        else:
            res.regions.append(row)
    sa, sb = ctx.sig_a, ctx.sig_b
    size_a, size_b = {r.region_id: r.size for r in pa.regions}, {r.region_id: r.size for r in pb.regions}

    def binding_row(p, sig, sizes, bnd):
        s = sig.get(bnd.name)
        return {"size": sizes.get(bnd.region_id), "dtype": s.dtype.name if s is not None else None,
                "shape": list(s.shape) if s is not None else None}

    res.bindings = _keyed(
        "binding", {x.name: binding_row(pa, sa, size_a, x) for x in pa.bindings},
        {x.name: binding_row(pb, sb, size_b, x) for x in pb.bindings},
        lambda x, y: {k: {"a": x[k], "b": y[k]} for k in x if x[k] != y[k]})
    # A kernel's own code: the per-kernel hash in its symbol name, and its function's bytes.
    # The module hash, file name and symbol names follow from those, so they are not repeated.
    ka, kb = kernel_identities(pa, pb)
    res.kernels = _keyed(
        "kernel", ka, kb,
        lambda x, y: _fields(("forward_smem_bytes", "backward_smem_bytes", "block_dim"), x, y)
        | _pair("forward_name", _unhashed(x.forward_name), _unhashed(y.forward_name))
        | _pair("backward_name", _unhashed(x.backward_name), _unhashed(y.backward_name)))
    res.code = _code_changes(pa, pb, modules_a, modules_b, (ka, kb))
    changed_code = {c["kernel"] for c in res.code}
    res.modules = _keyed(
        "module", {x.module_name: x for x in pa.modules}, {x.module_name: x for x in pb.modules},
        lambda x, y: _fields(("module_hash", "binary_filename", "binary_digest", "target_arch"), x, y)
        | _pair("binary_kind", _enum_name(m.CudaBinaryKind, x.binary_kind), _enum_name(m.CudaBinaryKind,
                                                                                      y.binary_kind)))
    for row in res.modules:
        if row["change"] != "changed":
            continue
        mh = {getattr(x, "module_hash") for x in pa.modules if x.module_name == row["module"]}
        keys = sorted({k.kernel_key for k in pa.kernels if k.module_hash in mh})
        row["kernels"] = keys
        row["code_changed"] = sorted(changed_code & set(keys))
        # Rebuilt with every kernel's code unchanged: one line, not one per kernel and op.
        row["rebuilt_only"] = not row["code_changed"] and set(row["fields"]) <= {"module_hash", "binary_filename",
                                                                                  "binary_digest"}
    res.ops = ctx.ops(pa.ops, pb.ops)
    ca, cb = pa.op_counts(), pb.op_counts()
    res.op_counts = {k: {"a": ca.get(k, 0), "b": cb.get(k, 0)} for k in sorted(set(ca) | set(cb))
                     if ca.get(k, 0) != cb.get(k, 0)}
    return res


def _enum_name(enum, value):
    """An enum field's value by name (``FLOAT32``), or the number where it names nothing."""
    try:
        return enum(value).name
    except (KeyError, ValueError):
        return value


_SUFFIXES = ("_cpu_forward", "_cpu_backward", "_cuda_kernel_forward", "_cuda_kernel_backward")


def _split_symbol(name: str) -> tuple:
    """``(name with the per-kernel hash replaced by '*', hash)`` of a kernel symbol, or ``(name, None)``."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            head, _, h = name[: -len(suffix)].rpartition("_")
            if head and h:
                return f"{head}_*{suffix}", h
    return name, None


def _unhashed(name: str) -> str:
    return _split_symbol(name)[0]


def _function_digest(p: m.Program, kernel: m.Kernel, read) -> Optional[str]:
    if read is None or not kernel.forward_name:
        return None
    from ..checks.elf import symbol_bytes  # noqa: PLC0415

    mod = next((x for x in p.modules if x.module_hash == kernel.module_hash), None)
    data = read(mod.binary_filename) if mod is not None else None
    if data is None:
        return None
    try:
        off, size = symbol_bytes(data, kernel.forward_name, mod.binary_filename)
    except Exception:  # noqa: BLE001  (CUDA images and odd objects: compare by hash only)
        return None
    return hashlib.sha256(memoryview(data)[off:off + size]).hexdigest()[:32]


def kernel_identities(pa: m.Program, pb: m.Program) -> tuple:
    """``({name: Kernel}, {name: Kernel})``: each program's kernels under names that pair them.

    A kernel is its key *and* its module: Warp's factories (``bsr_mv``) and closures with
    ``@wp.kernel(module="unique")`` give several kernels one key, each in a module of its own.
    Kernels pair by key and module name; a key left with one unpaired kernel on each side pairs
    across modules (a "unique" module's name holds the kernel's hash, so an edit renames it).
    The name is the key where it names one kernel in both programs, else ``key [module]``.
    """
    from collections import Counter  # noqa: PLC0415

    def named(p) -> dict:
        mods = {x.module_hash: x.module_name for x in p.modules}
        return {(k.kernel_key, mods.get(k.module_hash, k.module_hash)): k for k in p.kernels}

    a_ids, b_ids = named(pa), named(pb)
    count_a, count_b = Counter(key for key, _ in a_ids), Counter(key for key, _ in b_ids)
    b_of = {ident: ident for ident in a_ids if ident in b_ids}  # a's identity -> b's, paired
    left_a = [ident for ident in a_ids if ident not in b_of]
    left_b = [ident for ident in b_ids if ident not in a_ids]
    for ident in left_a:
        alone = [j for j in left_b if j[0] == ident[0]]
        if len(alone) == 1 and sum(1 for i in left_a if i[0] == ident[0]) == 1:
            b_of[ident] = alone[0]

    def name(ident) -> str:
        return kernel_name(ident[0], ident[1], count_a[ident[0]] > 1 or count_b[ident[0]] > 1)

    a_of = {j: i for i, j in b_of.items()}
    return ({name(i): k for i, k in a_ids.items()},
            {name(a_of.get(j, j)): k for j, k in b_ids.items()})


def _code_changes(pa: m.Program, pb: m.Program, read_a, read_b, identities: tuple) -> list:
    """Kernels in both programs whose own code differs (per-kernel hash, then function bytes);
    ``identities`` is :func:`kernel_identities` of the two."""
    ka, kb = identities
    out = []
    for label, x in ka.items():
        y = kb.get(label)
        if y is None:
            continue
        ha, hb = _split_symbol(x.forward_name)[1], _split_symbol(y.forward_name)[1]
        fa, fb = _function_digest(pa, x, read_a), _function_digest(pb, y, read_b)
        same_bytes = None if fa is None or fb is None else fa == fb
        if ha != hb or same_bytes is False:
            out.append({"kernel": label, "change": "code changed", "hash": {"a": ha, "b": hb},
                        "function_bytes": None if same_bytes is None else ("same" if same_bytes else "differ")})
    return out


def _writes_whole(op: m.Op, fx, rid: int, sizes: dict) -> bool:
    """Whether an op overwrites all of region ``rid``: its own byte ranges (the op table's, through
    ``effects``) cover it, or the op rebuilds its outputs whole (``Op.REBUILDS_OUTPUTS``).

    Only non-kernel ops have exact ranges; a kernel may write part of an array
    argument, so the caller never asks for one.
    """
    if type(op).REBUILDS_OUTPUTS:
        return True
    size = sizes.get(rid, 0)
    return any(a.region_id == rid and a.mode == "write" and a.offset == 0 and a.nbytes >= size
               for a in fx.accesses)


def _first_touch(p: m.Program, notes) -> dict:
    """``{region_id: "op PATH KIND"}`` for regions whose first use, in stream order, is a whole write by a
    non-kernel op (so their initial data is never read); kernel writes may be partial and do not count."""
    from ..checks.effects import effects  # noqa: PLC0415

    sigs = notes.kernel_map() if notes is not None else {}
    sizes = {r.region_id: r.size for r in p.regions}
    seen: set = set()
    out: dict = {}

    def walk(ops, prefix: str) -> None:
        for i, op in enumerate(ops):
            path = f"{prefix}{i}"
            if isinstance(op, (m.If, m.While)):
                seen.add(op.cond_region_id)
                if isinstance(op, m.If):
                    walk(op.then_ops, path + ".")
                    walk(op.else_ops, path + ".e")
                else:
                    walk(op.body, path + ".")
                continue
            fx = effects(op, p, sigs)
            reads = fx.read_regions()
            for r in fx.written_regions():
                if (r not in seen and r not in reads and not isinstance(op, m.KernelLaunch)
                        and _writes_whole(op, fx, r, sizes)):
                    out[r] = f"op {path} {op.op_type.name}"
                seen.add(r)
            seen.update(reads)

    walk(p.ops, "")
    return out


def _pair(name, va, vb) -> dict:
    return {} if va == vb else {name: {"a": va, "b": vb}}


def _fields(names, x, y) -> dict:
    out = {}
    for n in names:
        out.update(_pair(n, getattr(x, n), getattr(y, n)))
    return out


def _keyed(what: str, da: dict, db: dict, compare) -> list:
    out = []
    for k in list(da) + [k for k in db if k not in da]:
        if k not in db:
            out.append({what: k, "change": "removed", "fields": {}})
        elif k not in da:
            out.append({what: k, "change": "added", "fields": {}})
        else:
            f = compare(da[k], db[k])
            if f:
                out.append({what: k, "change": "changed", "fields": f})
    return out


def _json_value(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"length": len(v), "sha256": hashlib.sha256(v).hexdigest()[:16]}
    if isinstance(v, tuple) and hasattr(v, "_asdict"):
        return dict(v._asdict())
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    return v


def _relocation(r, meshes: dict) -> tuple:
    """A relocation as compared: a HANDLE slot holds the captured process's handle, which Warp
    replaces at load with the structure it rebuilt, so it is compared by what it refers to (``mesh 0``,
    the index in the file's mesh table), not by its value; an unknown handle is just ``handle``."""
    kind = _enum_name(m.RelocKind, r.kind)
    if r.kind == m.RelocKind.HANDLE:
        i = meshes.get(r.region_offset)
        return (r.value_byte_offset, r.region_id, f"mesh {i}" if i is not None else "handle", kind)
    return (r.value_byte_offset, r.region_id, r.region_offset, kind)


class _Context:
    def __init__(self, pa: m.Program, pb: m.Program):
        self.pa, self.pb = pa, pb
        self.meshes_a = {mesh.original_ptr: i for i, mesh in enumerate(pa.meshes)}
        self.meshes_b = {mesh.original_ptr: i for i, mesh in enumerate(pb.meshes)}
        self.ann_a, self.ann_b = ann.read_annotations(pa), ann.read_annotations(pb)
        self.sig_a = self.ann_a.signature_map() if self.ann_a is not None else {}
        self.sig_b = self.ann_b.signature_map() if self.ann_b is not None else {}
        from ..checks.sources import Sources  # noqa: PLC0415

        self.src_a = Sources(self.ann_a, pa.ops) if self.ann_a is not None else Sources()
        self.src_b = Sources(self.ann_b, pb.ops) if self.ann_b is not None else Sources()
        self.with_sources = self.src_a.has_call_sites or self.src_b.has_call_sites

    # -- regions ----------------------------------------------------------------

    @staticmethod
    def region_digest(p: m.Program, r: m.Region) -> Optional[str]:
        if not r.has_initial_data or r.data is None:
            return None
        slots = [(pl.offset + i * pl.stride) for pl in p.pointer_locations if pl.region_id == r.region_id
                 for i in range(pl.count)]
        if not slots:
            return hashlib.sha256(r.data).hexdigest()[:32]
        raw = np.frombuffer(r.data, dtype=np.uint8).copy()
        for off in slots:
            raw[off:off + 8] = 0  # handles are patched at load: not content
        return hashlib.sha256(raw.data).hexdigest()[:32]

    # -- ops ----------------------------------------------------------------------

    @staticmethod
    def _align_key(op: m.Op):
        if isinstance(op, m.KernelLaunch):
            return (op.op_type, op.kernel_key, op.is_forward)
        return (op.op_type,)

    def ops(self, a: list, b: list, pa: tuple = (), pb: tuple = ()) -> list:
        """Rows of the differences between op lists ``a`` and ``b``, which lie at paths ``pa`` and
        ``pb`` (the enclosing op and body, :mod:`wrpkit.checks.sources`; empty at top level)."""
        out = []
        sm = difflib.SequenceMatcher(None, [self._align_key(x) for x in a], [self._align_key(x) for x in b],
                                     autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                for i, j in zip(range(i1, i2), range(j1, j2)):
                    f = self.op_fields(a[i], b[j], pa + (i,), pb + (j,))
                    if f:
                        out.append(self._row(i, j, "changed", a[i], f, pa, pb))
                continue
            for i in range(i1, i2):
                out.append(self._row(i, None, "removed", a[i], {}, pa, pb))
            for j in range(j1, j2):
                out.append(self._row(None, j, "added", b[j], {}, pa, pb))
        return out

    def _row(self, i, j, change, op, fields, pa: tuple = (), pb: tuple = ()) -> dict:
        row = {"a": i, "b": j, "change": change, "kind": op.op_type.name,
               "kernel": launch_label(op, self.pa if i is not None else self.pb) if isinstance(op, m.KernelLaunch)
               else None, "fields": fields}
        if self.with_sources:
            row["source"] = {"a": self.src_a.op(pa + (i,)) if i is not None else None,
                             "b": self.src_b.op(pb + (j,)) if j is not None else None}
        return row

    def op_fields(self, x: m.Op, y: m.Op, pa: tuple = (), pb: tuple = ()) -> dict:
        if isinstance(x, m.KernelLaunch):
            return self.launch_fields(x, y)
        out = {}
        for n in m.op_fields(type(x)):
            if n in _HANDLE_FIELDS:
                continue
            va, vb = getattr(x, n), getattr(y, n)
            if n in ("then_ops", "else_ops", "body"):
                body = 1 if n == "else_ops" else 0
                sub = self.ops(va, vb, pa + (body,) if pa else (), pb + (body,) if pb else ())
                if sub:
                    out[n] = sub
            elif isinstance(va, (bytes, bytearray, memoryview)):
                if bytes(va) != bytes(vb):
                    out[n] = {"a": _json_value(va), "b": _json_value(vb)}
            elif va != vb:
                enum = type(x).ENUM_FIELDS.get(n)
                if enum is not None:
                    out[n] = {"a": _enum_name(enum, va), "b": _enum_name(enum, vb)}
                else:
                    out[n] = {"a": _json_value(va), "b": _json_value(vb)}
        return out

    def launch_fields(self, x: m.KernelLaunch, y: m.KernelLaunch) -> dict:
        out = {}
        da, db = list(x.shape[:max(1, x.ndim)]), list(y.shape[:max(1, y.ndim)])
        if da != db:
            out["dim"] = {"a": da, "b": db}
        out.update(_fields(("size", "max_blocks", "block_dim", "smem_bytes", "grid_stride", "is_forward",
                            "cluster_dim"), x, y))
        ra = [_relocation(r, self.meshes_a) for r in x.relocations]
        rb = [_relocation(r, self.meshes_b) for r in y.relocations]
        if ra != rb:
            out["relocations"] = {"a": [list(r) for r in ra], "b": [list(r) for r in rb]}
        # Arguments numbered from 0, as `wrp inspect` numbers them (Warp's param_index counts the bounds slot).
        pa = [(p.param_index - 1, p.num_relocs, p.value_size) for p in x.params]
        pb = [(p.param_index - 1, p.num_relocs, p.value_size) for p in y.params]
        if pa != pb:
            out["params"] = {"a": [list(p) for p in pa], "b": [list(p) for p in pb]}
            return out
        args = self._arg_changes(x, y)
        if args:
            out["args"] = args
        return out

    def _arg_changes(self, x: m.KernelLaunch, y: m.KernelLaunch) -> list:
        va, vb = _masked(x), _masked(y)
        ks = self.ann_a.kernel_signature(x.module_hash, x.kernel_key) if self.ann_a is not None else None
        rels_a = {p.param_index: rels for p, rels in x.param_relocations()}
        rels_b = {p.param_index: rels for p, rels in y.param_relocations()}
        changes = []
        for pa, pb in zip(x.params, y.params):
            ba = va[pa.value_offset:pa.value_offset + pa.value_size]
            bb = vb[pb.value_offset:pb.value_offset + pb.value_size]
            if ba == bb:
                continue
            arg = launch_argument(ks.arguments, pa) if ks is not None else None
            row = {"param": pa.param_index - 1, "name": arg.name if arg is not None else None,
                   "type": arg.type if arg is not None else None}
            # An array argument reads as its descriptor (shape, strides), whether or not the file is typed.
            da = _array_of(pa, rels_a.get(pa.param_index, ()), ba)
            db = _array_of(pb, rels_b.get(pb.param_index, ()), bb)
            if da is not None and db is not None:
                row["a"], row["b"] = da, db
            else:
                row["a"], row["b"] = _decode_arg(arg, ba), _decode_arg(arg, bb)
            changes.append(row)
        return changes


def _masked(op: m.KernelLaunch) -> bytes:
    """``value_data`` with every relocated 8-byte slot zeroed (pointers differ per process)."""
    if not op.relocations:
        return bytes(op.value_data)
    buf = bytearray(op.value_data)
    for adjoint in (False, True):
        for p, relocs in op.param_relocations(adjoint):
            for r in relocs:
                o = p.value_offset + r.value_byte_offset  # relative to the param's value (apic.cpp)
                if 0 <= o <= len(buf) - 8:
                    buf[o:o + 8] = bytes(8)
    return bytes(buf)


def _array_of(param: m.LaunchParam, rels, raw: bytes) -> Optional[dict]:
    """``{"array": {"ndim", "shape", "strides"}}`` of an argument that is one ``array_t`` (its
    relocations say so), else None (a struct of arrays, an indexed array, a scalar)."""
    try:
        found = list(argument_arrays(param, rels))
    except DescriptorLayoutError:
        return None
    if len(found) != 1 or found[0].indexed or found[0].offset != 0 or len(raw) != found[0].size:
        return None
    ndim, shape, strides = descriptor_view(raw, 0)
    n = max(1, min(int(ndim), 4))
    return {"array": {"ndim": int(ndim), "shape": list(shape[:n]), "strides": list(strides[:n])}}


def _decode_arg(arg, raw: bytes):
    """A scalar argument's value decoded through its annotation, else its bytes in hex."""
    dt = getattr(arg, "dtype", None) if arg is not None else None
    if dt is not None and not arg.ndim and not dt.fields and dt.scalar != ann.ScalarKind.UNKNOWN:
        try:
            base, dims = ann.element_layout(dt)
            n = len(raw) // base.itemsize
            if n * base.itemsize == len(raw) and n == int(np.prod(dims or (1,))):
                vals = np.frombuffer(raw, dtype=base).reshape(dims or ())
                if base.kind == "f" and base.itemsize < 8:
                    # The shortest decimal that reads back as the same float32/16 (0.1, not 0.10000000149...).
                    shortest = [float(str(v)) for v in vals.reshape(-1)]  # numpy scalars print shortest
                    return np.array(shortest, dtype=object).reshape(vals.shape).tolist()
                return vals.tolist()
        except (ValueError, TypeError):
            pass
    return {"hex": raw[:64].hex() + ("..." if len(raw) > 64 else "")}


__all__ = ["diff", "diff_programs", "DiffResult"]
