"""The dtype and shape of every region: one function, used by every tool.

:func:`region_types` takes the strongest source first:

1. the user's ``--dtype`` (``dtypes=``);
2. the typed signature wrpkit records for a binding;
3. the kernel-argument annotations of **every** launch that passes the
   region, bound or not, arrays inside struct arguments included (and any
   extra annotations a caller passes, e.g. built from the kernels' source);
4. the dtype that op records carry (SCAN, REDUCTION, the sorts, run-length
   encoding, BSR ops, hash-grid points);
5. the dtypes of the inputs given.

Where sources disagree on the element type the region keeps the strongest
one and lists the others in ``conflicts``; where the strongest source
itself disagrees (two launches view one region as two types) the region is
left untyped and the conflict said.  Nothing is guessed.

Shapes are written one way everywhere: Warp's array shape, outermost first,
with the element's own dims in its dtype.  A ``wp.array(dtype=wp.vec3f)`` of
8 elements is ``vec3f (8,)``; its numpy view (:meth:`RegionType.numpy_shape`)
is ``(8, 3)``.  See ``docs/op-table.md`` ("One shape convention").

Nothing here imports Warp or numpy.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional

from ..records import field, record
from .. import model as m
from ..errors import WrpBindingError
from ..formats import annotations as ann
from ..formats.launch_arrays import ARRAY_BYTES, descriptor_view
from .effects import array_field_dtype_name, effects, kernel_signatures

#: Rank of each source, strongest first.
SOURCES = ("--dtype", "signature", "kernel argument", "op record", "input")

_SUFFIX = {"h": ann.ScalarKind.FLOAT16, "f": ann.ScalarKind.FLOAT32, "d": ann.ScalarKind.FLOAT64,
           "b": ann.ScalarKind.INT8, "ub": ann.ScalarKind.UINT8, "s": ann.ScalarKind.INT16,
           "us": ann.ScalarKind.UINT16, "i": ann.ScalarKind.INT32, "ui": ann.ScalarKind.UINT32,
           "l": ann.ScalarKind.INT64, "ul": ann.ScalarKind.UINT64}
_KIND_SUFFIX = {v: k for k, v in _SUFFIX.items()}
_COMPOUND = re.compile(r"^(vec|mat|quat|transform|spatial_vector|spatial_matrix)(\d*)(h|f|d|b|ub|s|us|i|ui|l|ul)$")
_APIC_KIND = {1: ann.ScalarKind.INT32, 2: ann.ScalarKind.UINT32, 3: ann.ScalarKind.INT64, 4: ann.ScalarKind.UINT64,
              5: ann.ScalarKind.FLOAT32, 6: ann.ScalarKind.FLOAT64}


def dtype_from_name(name: str) -> Optional[ann.DataType]:
    """The DataType of a Warp type name (``"float32"``, ``"vec3f"``, ``"mat33d"``, ``"quatf"``), or None."""
    for kind, n in ann.SCALAR_NAMES.items():
        if n == name:
            return ann.DataType(name, kind, (), ann.SCALAR_SIZES[kind])
    if name in ("float", "int"):
        return dtype_from_name("float32" if name == "float" else "int32")
    mt = _COMPOUND.match(name)
    if mt is None:
        return None
    family, digits, suffix = mt.groups()
    kind = _SUFFIX[suffix]
    if family == "vec" and len(digits) == 1 and digits != "0":
        shape = (int(digits),)
    elif family == "mat" and len(digits) == 2 and "0" not in digits:
        shape = (int(digits[0]), int(digits[1]))
    elif family == "quat" and not digits:
        shape = (4,)
    elif family == "transform" and not digits:
        shape = (7,)
    elif family == "spatial_vector" and not digits:
        shape = (6,)
    elif family == "spatial_matrix" and not digits:
        shape = (6, 6)
    else:
        return None
    n = 1
    for d in shape:
        n *= d
    return ann.DataType(name, kind, shape, n * ann.SCALAR_SIZES[kind])


def _lanes_dtype(apic_dtype: int, lanes: int) -> Optional[ann.DataType]:
    """The element type of ``lanes`` scalars of an APIC scalar type: the scalar, or ``vec<lanes><suffix>``."""
    kind = _APIC_KIND.get(apic_dtype)
    if kind is None or lanes <= 0:
        return None
    name = ann.SCALAR_NAMES[kind]
    if lanes == 1:
        return dtype_from_name(name)
    return dtype_from_name(f"vec{lanes}{_KIND_SUFFIX[kind]}") if lanes <= 9 else None


@record
class RegionType:
    """What is known of one region's type.

    Attributes:
        region_id: The region.
        size: Its bytes.
        bindings: Binding names of the region, in file order.
        arguments: Names of the kernel arguments that pass it (``s.field`` for struct fields).
        dtype: Element type, or None when unknown (or conflicting).
        shape: Warp array shape (element dims are the dtype's), or None.
        strides: Byte strides of ``shape``, or None.
        byte_offset: Byte offset of element 0 in the region.
        source: Where the type comes from: ``"--dtype"``, ``"signature"``,
            ``"kernel K argument A"``, ``"SCAN record"``, ``"input x"``, or ``"unknown"``.
        conflicts: What other sources say where they disagree, in words.
        seen: Every source that typed the region, strongest first, as ``(source, DataType, shape)``.
    """

    region_id: int
    size: int
    bindings: list = field(default_factory=list)
    arguments: list = field(default_factory=list)
    dtype: Optional[ann.DataType] = None
    shape: Optional[tuple] = None
    strides: Optional[tuple] = None
    byte_offset: int = 0
    source: str = "unknown"
    conflicts: list = field(default_factory=list)
    seen: list = field(default_factory=list, repr=False)
    is_input: bool = False
    is_output: bool = False

    @property
    def name(self) -> str:
        """The binding's name, else the kernel arguments' (``"f / forces"``), else ``"region N"``."""
        if self.bindings:
            return "/".join(self.bindings)
        if self.arguments:
            return " / ".join(self.arguments[:3]) + (" …" if len(self.arguments) > 3 else "")
        return f"region {self.region_id}"

    def signature(self) -> Optional[ann.ArraySignature]:
        """The typed view of the region as an ArraySignature, or None when untyped."""
        if self.dtype is None or self.shape is None:
            return None
        return ann.ArraySignature(self.bindings[0] if self.bindings else f"region {self.region_id}", self.dtype,
                                  tuple(self.shape), tuple(self.strides or ()), self.byte_offset,
                                  self.is_input, self.is_output)

    def numpy_shape(self) -> Optional[tuple]:
        """The shape of the region's numpy view: ``shape`` plus the element's dims."""
        if self.dtype is None or self.shape is None:
            return None
        return tuple(self.shape) + tuple(int(d) for d in self.dtype.shape if not self.dtype.fields)

    def to_json(self) -> dict:
        return {"region": self.region_id, "name": self.name, "bindings": list(self.bindings),
                "arguments": list(self.arguments), "dtype": self.dtype.name if self.dtype is not None else None,
                "shape": list(self.shape) if self.shape is not None else None, "source": self.source,
                "conflicts": list(self.conflicts)}


class _Candidate:
    __slots__ = ("rank", "dtype", "shape", "strides", "offset", "source")

    def __init__(self, rank, dtype, shape, strides, offset, source):
        self.rank, self.dtype, self.shape, self.strides, self.offset, self.source = \
            rank, dtype, shape, strides, offset, source


def _whole(dtype: ann.DataType, size: int):
    """``(shape, strides)`` of a whole region as a 1-D array of ``dtype``, or None when it does not divide."""
    es = int(dtype.size)
    if es <= 0 or size % es:
        return None
    return (size // es,), (es,)


def _plain(dt) -> bool:
    return dt is not None and not dt.fields and dt.scalar != ann.ScalarKind.UNKNOWN


def _record_candidates(op, add) -> None:
    """Element types that op records carry (rank 3)."""
    t = op.op_type
    i32 = dtype_from_name("int32")
    if t == m.OpType.SCAN:
        dt = _lanes_dtype(op.dtype, op.type_len)
        add(op.src_region_id, dt, "SCAN record")
        add(op.dst_region_id, dt, "SCAN record")
    elif t == m.OpType.REDUCTION:
        dt = _lanes_dtype(op.dtype, op.type_len)
        add(op.input_a_region_id, dt, "REDUCTION record")
        if op.input_b_region_id >= 0:
            add(op.input_b_region_id, dt, "REDUCTION record")
        add(op.output_region_id, dt if op.kind == 1 else _lanes_dtype(op.dtype, 1), "REDUCTION record")
    elif t == m.OpType.RADIX_SORT:
        add(op.keys_region_id, _lanes_dtype(op.dtype, 1), "RADIX_SORT record")
    elif t == m.OpType.SEGMENTED_SORT:
        add(op.keys_region_id, _lanes_dtype(op.dtype, 1), "SEGMENTED_SORT record")
        add(op.segstart_region_id, i32, "SEGMENTED_SORT record")
        add(op.segend_region_id, i32, "SEGMENTED_SORT record")
    elif t == m.OpType.RUNLENGTH_ENCODE:
        for ref in op.REGIONS:
            add(getattr(op, ref.region), i32, "RUNLENGTH_ENCODE record")
    elif t in (m.OpType.BSR_FROM_TRIPLETS, m.OpType.BSR_TRANSPOSE):
        for ref in op.REGIONS:
            if ref.role != "tpl_values":  # block values: their scalar type is not recorded
                add(getattr(op, ref.region), i32, f"{t.name} record")
    elif t == m.OpType.HASH_GRID_UPDATE:
        add(op.points_region_id, dtype_from_name("vec3f"), "HASH_GRID_UPDATE record")


def merged_signatures(program: m.Program, extra: Optional[Mapping] = None) -> dict:
    """The file's kernel signatures, with ``extra`` ones (keyed ``(module_hash, kernel_key)`` or by
    ``kernel_key`` alone) filling in kernels the file does not annotate."""
    sigs = dict(kernel_signatures(program))
    if not extra:
        return sigs
    by_key = {k: v for k, v in extra.items() if isinstance(k, str)}
    for k, v in extra.items():
        if isinstance(k, tuple):
            sigs.setdefault(k, v)
    if by_key:
        for k in program.kernels:
            s = by_key.get(k.kernel_key)
            if s is not None:
                sigs.setdefault((k.module_hash, k.kernel_key), s)
    return sigs


def region_types(program: m.Program, *, dtypes: Optional[Mapping] = None, extra_signatures: Optional[Mapping] = None,
                 inputs: Optional[Mapping] = None, annotations=None) -> dict:
    """``{region_id: RegionType}`` for every region of a program.

    Args:
        program: The decoded program.
        dtypes: The user's ``--dtype``: ``{binding name or region id: DataType or type name}``.
        extra_signatures: Kernel signatures to use where the file has none
            (see :func:`merged_signatures`), e.g. built from the kernels' source.
        inputs: ``{binding name: array}`` the caller gives (anything with ``dtype`` and ``shape``).
        annotations: The decoded annotations, when the caller has them.

    Returns:
        One :class:`RegionType` per region.
    """
    if annotations is None:
        try:
            annotations = ann.read_annotations(program)
        except Exception:  # noqa: BLE001 -- malformed annotations type nothing (the validator says why)
            annotations = None
    out = {r.region_id: RegionType(r.region_id, r.size) for r in program.regions}
    cands: dict = {rid: [] for rid in out}
    by_name: dict = {}
    for b in program.resolved_bindings():  # a repeated name: the region Warp's loader uses
        rt = out.get(b.region_id)
        if rt is not None and b.name not in rt.bindings:
            rt.bindings.append(b.name)
        by_name.setdefault(b.name, b.region_id)

    def add(rid, dt, source, rank, shape=None, strides=None, offset=0):
        if rid not in cands or dt is None:
            return
        if shape is None:
            whole = _whole(dt, out[rid].size)
            if whole is None:
                return
            shape, strides = whole
        cands[rid].append(_Candidate(rank, dt, tuple(shape), tuple(strides), offset, source))

    # 1. --dtype
    for key, dt in (dtypes or {}).items():
        if isinstance(dt, str):
            dt = dtype_from_name(dt)
            if dt is None:
                continue
        rid = key if isinstance(key, int) else by_name.get(key)
        add(rid, dt, "--dtype", 0)
    # 2. the typed signature
    if annotations is not None:
        for s in annotations.signature:
            rid = by_name.get(s.name)
            if rid is not None and s.dtype is not None and (s.dtype.fields or s.dtype.scalar != ann.ScalarKind.UNKNOWN):
                add(rid, s.dtype, "signature", 1, s.shape, s.strides, s.byte_offset)
                rt = out[rid]
                rt.is_input |= bool(s.is_input)
                rt.is_output |= bool(s.is_output)
    # 3. kernel arguments of every launch (each distinct launch once); 4. op records
    sigs = merged_signatures(program, extra_signatures)
    named = {}
    for s in ([annotations] if annotations is not None else []):
        for ks in s.kernel_signatures:
            for a in ks.arguments:
                if a.dtype is not None and _plain(a.dtype):
                    named.setdefault(a.dtype.name, a.dtype)
    seen: set = set()
    seen_ids: dict = {}  # decoders share one object among identical records: most repeats stop here
    for _, op in m.walk_ops(program.ops):
        if isinstance(op, m.KernelLaunch):
            if seen_ids.get(id(op)) is op:
                continue
            seen_ids[id(op)] = op
            key = (op.module_hash, op.kernel_key, tuple(op.relocations), bytes(op.value_data))
            if key in seen:
                continue
            seen.add(key)
            ks = sigs.get((op.module_hash, op.kernel_key))
            args = ks.arguments if ks is not None else ()
            for acc in effects(op, program, sigs).accesses:
                if acc.part == "index" and acc.region_id in out:
                    # an indexed array's index buffer: named after the array it indexes
                    label = f"{acc.name} indices"
                    if label not in out[acc.region_id].arguments:
                        out[acc.region_id].arguments.append(label)
                    continue
                if acc.part not in ("data", "grad") or acc.region_id not in out:
                    continue
                # An array's gradient (``x.grad``, which a backward launch passes beside ``x``) has
                # the array's dtype and shape.
                label = acc.name if acc.part == "data" else f"{acc.name}.grad"
                rt = out[acc.region_id]
                if label not in rt.arguments:
                    rt.arguments.append(label)
                a = args[acc.param - 1] if 0 < acc.param <= len(args) else None
                if a is None:
                    continue
                where = f"kernel {op.kernel_key.rsplit('.', 1)[-1]} argument {label}"
                if acc.field:
                    fdt = _field(a.dtype, acc.field)
                    dname = array_field_dtype_name(fdt.name) if fdt is not None else None
                    dt = (named.get(dname) or dtype_from_name(dname)) if dname else None
                    add(acc.region_id, dt, where, 2)
                    continue
                if not a.ndim or not _plain(a.dtype):
                    continue
                p = op.params[acc.param - 1] if 0 < acc.param <= len(op.params) else None
                shape = strides = None
                if p is not None and p.value_offset + ARRAY_BYTES <= len(op.value_data):
                    ndim, dims, steps = descriptor_view(op.value_data, p.value_offset)
                    first = next((r for r in op.relocations if r.region_id == acc.region_id), None)
                    if 1 <= ndim <= 4 and first is not None and first.region_offset == 0 and \
                            _covers(dims[:ndim], steps[:ndim], a.dtype.size, rt.size):
                        shape, strides = dims[:ndim], steps[:ndim]
                add(acc.region_id, a.dtype, where, 2, shape, strides)
        else:
            _record_candidates(op, lambda rid, dt, src: add(rid, dt, src, 3))
    # 5. inputs given
    for name, arr in (inputs or {}).items():
        rid = by_name.get(name)
        dt = _numpy_dtype(getattr(arr, "dtype", None))
        if rid is not None and dt is not None:
            add(rid, dt, f"input {name}", 4)
    for rid, rt in out.items():
        _decide(rt, cands[rid])
    return out


def _covers(shape, strides, elem: int, size: int) -> bool:
    """Whether a contiguous view of ``shape`` covers a region of ``size`` bytes exactly."""
    n = 1
    for d in shape:
        n *= d
    if n * elem != size:
        return False
    expect = elem
    for d, s in zip(reversed(shape), reversed(strides)):
        if d > 1 and s != expect:
            return False
        expect *= d
    return True


def _field(dtype, path: str):
    for part in path.split("."):
        hit = next((f for f in dtype.fields if f.name == part), None) if dtype is not None else None
        if hit is None:
            return None
        dtype = hit.type
    return dtype


def _numpy_dtype(npd) -> Optional[ann.DataType]:
    """The scalar DataType of a numpy dtype (inputs carry no vector type)."""
    if npd is None:
        return None
    kind, size = getattr(npd, "kind", None), getattr(npd, "itemsize", None)
    for k, code in ann._SCALAR_CODES.items():  # noqa: SLF001 -- one table of codes
        c = code.lstrip("<")
        if (c == "?" and kind == "b") or (c[:1] == kind and int(c[1:] or 1) == size):
            return dtype_from_name(ann.SCALAR_NAMES[k])
    return None


def _decide(rt: RegionType, cands: list) -> None:
    if not cands:
        return
    cands.sort(key=lambda c: c.rank)
    rt.seen = [(c.source, c.dtype, c.shape) for c in cands]
    best_rank = cands[0].rank
    top = [c for c in cands if c.rank == best_rank]
    names = list(dict.fromkeys(c.dtype.name for c in top))
    if len(names) > 1:
        rt.conflicts.append(" vs ".join(f"{c.dtype.name} ({c.source})" for c in
                                        {c.dtype.name: c for c in top}.values()))
        rt.source = "conflict"
        return
    # among equals, a view that covers the whole region with its own shape (a 2-D array) beats a flat one
    win = next((c for c in top if len(c.shape) > 1), top[0])
    rt.dtype, rt.shape, rt.strides, rt.byte_offset = win.dtype, win.shape, win.strides, win.offset
    rt.source = win.source
    for c in cands:
        if c.rank > best_rank and c.dtype.name != win.dtype.name:
            text = f"{c.dtype.name} ({c.source})"
            if text not in rt.conflicts and not _compatible(win.dtype, c.dtype):
                rt.conflicts.append(text)


def _compatible(a: ann.DataType, b: ann.DataType) -> bool:
    """Whether a weaker source's type says the same (a vec3f region scanned as float32 lanes is vec3f)."""
    if a.name == b.name:
        return True
    return a.scalar == b.scalar and not a.fields and not b.fields and (a.size % max(1, b.size) == 0 or
                                                                       b.size % max(1, a.size) == 0)


def user_dtype_signatures(program: m.Program, dtypes: Mapping, *, annotations=None) -> dict:
    """Type the bindings the user's ``--dtype NAME=TYPE`` names, through :func:`region_types`
    (where ``--dtype`` is the strongest source), as ``wrp replay`` does.

    Args:
        program: The program.
        dtypes: ``{binding name: (TYPE as the user wrote it, its DataType)}``; every name a binding.
        annotations: The program's decoded annotations, when the caller has them.

    Returns:
        ``{name: ArraySignature}``: each binding as a 1-D array of its type over the whole region
        (``vec3f (8,)``), an input and an output.

    Raises:
        WrpBindingError: The file already records the binding's type (``--dtype`` is for bindings
            without one), or the binding's bytes are not a whole number of elements of the type.
    """
    types = region_types(program, dtypes={n: dt for n, (_, dt) in dtypes.items()}, annotations=annotations)
    by_name = program.binding_map()
    out = {}
    for name, (text, dt) in dtypes.items():
        rt = types[by_name[name]]
        recorded = next(((d, shape) for src, d, shape in rt.seen if src == "signature"), None)
        if recorded is not None:
            raise WrpBindingError(f"--dtype {name}={text}: the file already records binding {name!r} as "
                                  f"{recorded[0].name} of shape {tuple(recorded[1])}",
                                  hint="--dtype is for bindings without a recorded signature; leave it out.")
        if rt.source == "conflict" and all(src == "--dtype" for src, _, _ in rt.seen[:2]):
            raise WrpBindingError(f"--dtype types region {rt.region_id} two ways: {rt.conflicts[0]}",
                                  hint=f"Bindings {', '.join(map(repr, rt.bindings))} are one region: give one type.")
        if rt.source != "--dtype":
            raise WrpBindingError(f"--dtype {name}={text}: binding {name!r} holds {rt.size} bytes, not a whole "
                                  f"number of {text} elements ({dt.size} bytes each)",
                                  hint="Check the type: the binding's size must be a multiple of its element size.")
        out[name] = ann.ArraySignature(name, rt.dtype, tuple(rt.shape), tuple(rt.strides), 0, True, True)
    return out


__all__ = ["RegionType", "region_types", "dtype_from_name", "merged_signatures", "user_dtype_signatures",
           "SOURCES"]
