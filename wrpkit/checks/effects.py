"""What each op reads and writes: the one answer every tool uses.

:func:`effects` turns an op into the byte ranges it reads and writes, from
the op table (``REGIONS`` on each op class of :mod:`wrpkit.ops`) and, for
a kernel launch, from each array argument's descriptor and the access the
file records for that argument (``wrpkit.run.capture.access`` at capture).  ``wrp
trace``, the stepper, ``wrp graph``, ``wrp inspect``, ``wrp diff`` and
``wrpkit.verify`` all call it; none keeps a list of its own.

A kernel argument whose access the file does not record (stock captures,
non-array arguments) is ``"touches"``: it counts as both read and written,
so tools stay conservative.  Nothing here imports Warp or numpy.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from .. import model as m
from ..formats.annotations import ACCESS_WORDS, ArgumentAccess, read_annotations, strided_reach
from ..formats.launch_arrays import DescriptorLayoutError, argument_arrays, descriptor_view, index_counts

#: Modes that count as a read / as a write.
READ_MODES = frozenset({"read", "readwrite", "touches"})
WRITE_MODES = frozenset({"write", "readwrite", "touches"})


class Access(NamedTuple):
    """One byte range an op touches.

    Attributes:
        region_id: The region.
        offset: First byte, in the region.
        nbytes: Bytes from ``offset`` (0 for an empty array).
        mode: ``"read"``, ``"write"``, ``"readwrite"``, ``"touches"`` (the
            file does not say: may read and write) or ``"unused"`` (an array
            argument the kernel never touches).
        name: The op table's role (``"dst"``, ``"keys"``, ``"cond"``) or the
            kernel argument's name (``"x"``, a struct field ``"s.pos"``;
            ``"arg2"`` where the file names no arguments).
        param: For a launch, the argument number (``param_index``, 1-based); else -1.
        part: ``"data"``, ``"grad"`` or ``"index"`` for a launch's array, ``""`` otherwise.
        field: The struct field an array sits in (``"pos"``), or ``""``.
    """

    region_id: int
    offset: int
    nbytes: int
    mode: str
    name: str
    param: int = -1
    part: str = ""
    field: str = ""

    @property
    def reads(self) -> bool:
        return self.mode in READ_MODES

    @property
    def writes(self) -> bool:
        return self.mode in WRITE_MODES


class OpEffects(NamedTuple):
    """Every byte range one op touches, in record (or argument) order."""

    accesses: tuple

    @property
    def reads(self) -> tuple:
        """The accesses that read (``read``, ``readwrite``, ``touches``)."""
        return tuple(a for a in self.accesses if a.mode in READ_MODES)

    @property
    def writes(self) -> tuple:
        """The accesses that write (``write``, ``readwrite``, ``touches``)."""
        return tuple(a for a in self.accesses if a.mode in WRITE_MODES)

    def read_regions(self) -> list:
        """Region ids read, in first-use order."""
        return list(dict.fromkeys(a.region_id for a in self.accesses if a.mode in READ_MODES))

    def written_regions(self) -> list:
        """Region ids written, in first-use order."""
        return list(dict.fromkeys(a.region_id for a in self.accesses if a.mode in WRITE_MODES))

    def region_modes(self) -> dict:
        """``{region_id: mode}``, the accesses of one region merged (read + write = readwrite)."""
        out: dict = {}
        for a in self.accesses:
            prev = out.get(a.region_id)
            out[a.region_id] = a.mode if prev is None else merge_modes(prev, a.mode)
        return out


def merge_modes(a: str, b: str) -> str:
    """The mode of two accesses to one place: ``read`` + ``write`` is ``readwrite``; ``touches`` wins."""
    if a == b:
        return a
    if "touches" in (a, b):
        return "touches"
    if a == "unused":
        return b
    if b == "unused":
        return a
    return "readwrite"


def kernel_signatures(program: m.Program) -> dict:
    """``{(module_hash, kernel_key): KernelSignature}`` of a program's annotations (empty without).

    Decoded once per annotations buffer; malformed annotations give an empty
    map (the validator reports them).
    """
    raw = program.annotations
    if not raw:
        return {}
    hit = program._derived.get("kernel_signatures")
    if hit is not None and hit[0] is raw:
        return hit[1]
    try:
        ann = read_annotations(program)
    except Exception:  # noqa: BLE001 -- a tool still draws/traces a file whose annotations are bad
        ann = None
    sigs = {} if ann is None else ann.kernel_map()
    program._derived["kernel_signatures"] = (raw, sigs)
    return sigs


def _region_sizes(program: m.Program) -> dict:
    """``{region_id: size}``, built once per program (launch spans are clamped to their region)."""
    hit = program._derived.get("region_sizes")
    if hit is not None and hit[0] is program.regions and hit[1] == len(program.regions):
        return hit[2]
    sizes = {r.region_id: r.size for r in program.regions}
    program._derived["region_sizes"] = (program.regions, len(program.regions), sizes)
    return sizes


#: What a backward launch does to an array's gradient, by what its forward launch does to the array
#: (reverse-mode differentiation, as Warp's generated adjoints do it): an array the forward pass reads
#: gets its gradient accumulated (``adj_x += ...``); the gradient of an array it writes is read and
#: then zeroed (``adj_array_store`` in Warp's ``array.h``: a stored value has no gradient left, unless
#: the array retains its gradient); so every gradient is read and written, except an unused
#: argument's.  The array's own data is only read by the adjoint (its forward values; Warp does not
#: store them again).  ``wp.Tape``'s backward launches are these; ``effects`` gives each its accesses
#: from here, so trace, graph, slice, diff and inspect agree that ``loss_k (backward)`` writes
#: ``f``'s gradient, not ``loss``.
ADJOINT_MODES = {"read": "readwrite", "write": "readwrite", "readwrite": "readwrite", "touches": "touches",
                 "unused": "unused"}


def kernel_name(key: str, module_name: str, shared: bool) -> str:
    """What every tool calls a kernel: its key, or ``key [module]`` where ``shared`` (other kernels
    of the same program or pair carry that key too: Warp's factories such as ``bsr_mv``, and
    closures made with ``@wp.kernel(module="unique")``, whose module name is the key plus a hash;
    that hash alone is shown then, ``scale [6f9c4382]``)."""
    if not shared:
        return key
    tail = module_name[len(key) + 1:] if module_name.startswith(key + "_") else ""
    return f"{key} [{tail or module_name}]"


def kernel_names(program: m.Program) -> dict:
    """``{(module_hash, kernel_key): name}`` of :func:`kernel_name` for every kernel of ``program``
    (a kernel is its key *and* its module), built once per program."""
    hit = program._derived.get("kernel_names")
    if hit is not None and hit[0] is program.kernels and hit[1] == len(program.kernels):
        return hit[2]
    modules = {x.module_hash: x.module_name for x in program.modules}
    hashes_of: dict = {}
    for k in program.kernels:
        hashes_of.setdefault(k.kernel_key, set()).add(k.module_hash)
    names = {(k.module_hash, k.kernel_key): kernel_name(k.kernel_key, modules.get(k.module_hash, k.module_hash),
                                                         len(hashes_of[k.kernel_key]) > 1)
             for k in program.kernels}
    program._derived["kernel_names"] = (program.kernels, len(program.kernels), names)
    return names


def launch_label(op, program: m.Program | None = None) -> str:
    """What every tool calls a kernel launch: its kernel's name (:func:`kernel_names`, where
    ``program`` is given; its key otherwise), with ``(backward)`` for an adjoint launch
    (``wp.Tape.backward``), so that forward and backward launches of one kernel are never merged,
    and neither are two kernels that share a key."""
    name = op.kernel_key
    if program is not None:
        name = kernel_names(program).get((op.module_hash, op.kernel_key), name)
    return name if op.is_forward else f"{name} (backward)"


def launch_argument(arguments, param):
    """The kernel argument a launch parameter passes (``param_index`` is 1-based: 0 is the launch bounds)."""
    i = param.param_index - 1
    return arguments[i] if 0 <= i < len(arguments) else None


def argument_name(arguments, param_index: int) -> str:
    """What every tool calls the kernel argument at launch parameter ``param_index`` (1-based): its name
    where a signature gives it, else ``argN`` numbered from 0 (``arg2``), as ``wrp inspect`` shows it."""
    i = param_index - 1
    return arguments[i].name if 0 <= i < len(arguments) else f"arg{i}"


def argument_mode(arg) -> str:
    """The mode of one kernel argument as the file records it (``"touches"`` where it does not say)."""
    if arg is None:
        return "touches"
    try:
        word = ACCESS_WORDS.get(ArgumentAccess(arg.access))
    except ValueError:
        word = None
    return word or "touches"


def array_field_dtype_name(type_name: str) -> Optional[str]:
    """The element dtype name inside a struct field's array type text (``array(ndim=1, dtype=vec3f)``)."""
    key = "dtype="
    i = type_name.find(key)
    if not type_name.startswith(("array", "indexedarray")) or i < 0:
        return None
    rest = type_name[i + len(key):]
    end = len(rest)
    for ch in ",)":
        j = rest.find(ch)
        if 0 <= j < end:
            end = j
    name = rest[:end].strip()
    return name or None


def _struct_field_at(dtype, offset: int):
    """The struct field of ``dtype`` that starts at byte ``offset`` (nested structs walked), as ``(path, field)``."""
    if dtype is None or not dtype.fields:
        return None
    for f in dtype.fields:
        if f.offset == offset:
            if f.type is not None and f.type.fields and f.type.fields[0].name != "data":
                inner = _struct_field_at(f.type, 0)
                if inner is not None:
                    return f"{f.name}.{inner[0]}", inner[1]
            return f.name, f
        if f.type is not None and f.type.fields and f.offset < offset < f.offset + f.type.size \
                and f.type.fields[0].name != "data":
            inner = _struct_field_at(f.type, offset - f.offset)
            if inner is not None:
                return f"{f.name}.{inner[0]}", inner[1]
    return None


def _launch_accesses(op: m.KernelLaunch, program: m.Program, signature) -> list:
    args = signature.arguments if signature is not None else ()
    out: list = []
    if op.legacy_args:
        for la in op.legacy_args:
            if not la.is_array or la.region_id < 0:
                continue
            a = args[la.param_index - 1] if 0 < la.param_index <= len(args) else None
            shape, strides = la.shape[:la.ndim], la.strides[:la.ndim]
            lo, hi = strided_reach(shape, strides) if 0 not in shape else (0, -la.element_size)
            out.append(Access(la.region_id, la.byte_offset + lo, hi - lo + la.element_size, argument_mode(a),
                              argument_name(args, la.param_index), la.param_index, "data"))
        return out
    blob = op.value_data
    sizes = _region_sizes(program)
    for p, rels in op.param_relocations():
        if not rels:
            continue
        a = launch_argument(args, p)
        name = argument_name(args, p.param_index)
        mode = argument_mode(a)
        try:
            descriptors = list(argument_arrays(p, rels))
        except DescriptorLayoutError:
            descriptors = None
        if descriptors is None or p.value_offset < 0 or p.value_offset + p.value_size > len(blob):
            # Not the layout of Warp's argument types (the validator says so): each pointer to its region's end.
            for r in rels:
                if r.kind == m.RelocKind.DATA_PTR and r.region_id >= 0:
                    size = sizes.get(r.region_id, 0)
                    out.append(Access(r.region_id, r.region_offset, max(0, size - r.region_offset), mode, name,
                                      p.param_index, "data"))
            continue
        is_struct = a is not None and a.dtype is not None and bool(a.dtype.fields) and not a.ndim
        for d in descriptors:
            if d.is_none():
                continue
            fname, elem = "", None
            if is_struct:
                hit = _struct_field_at(a.dtype, d.offset)
                if hit is not None:
                    fname = hit[0]
            elif a is not None and a.ndim and a.dtype is not None:
                elem = int(a.dtype.size) or None
            base = p.value_offset + d.offset
            ndim, shape, strides = descriptor_view(blob, base)
            label = f"{name}.{fname}" if fname else name
            data, grad = d.relocations[0], d.relocations[1]
            if d.indexed:
                counts = index_counts(blob, base)
                for k, r in enumerate(d.relocations[2:6]):
                    if r.kind == m.RelocKind.DATA_PTR and r.region_id >= 0:
                        out.append(Access(r.region_id, r.region_offset, 4 * max(0, counts[k]), "read", label,
                                          p.param_index, "index", fname))
            span = _span(ndim, shape, strides, elem)
            if op.is_forward:
                modes = ((data, "data", mode), (grad, "grad", "touches"))
            else:  # what the adjoint does: see ADJOINT_MODES
                modes = ((data, "data", "unused" if mode == "unused" else "read"),
                         (grad, "grad", ADJOINT_MODES.get(mode, "touches")))
            for r, part, how in modes:
                if r.kind != m.RelocKind.DATA_PTR or r.region_id < 0 or (part == "grad" and op.is_forward):
                    continue
                start = max(0, r.region_offset + span[0])
                # the element size may be a guess (no annotations): never past the region's end
                n = max(0, min(span[1], sizes.get(r.region_id, 0) - start))
                out.append(Access(r.region_id, start, n, how, label, p.param_index, part, fname))
    return out


def _span(ndim: int, shape, strides, elem: Optional[int]) -> tuple:
    """``(first byte relative to element 0, bytes)`` of an ``array_t`` view."""
    if not 1 <= ndim <= 4:
        return 0, 0
    shape, strides = shape[:ndim], strides[:ndim]
    if any(s <= 0 for s in shape):
        return 0, 0
    if elem is None:
        # The element size is not in the file: the innermost stride of a contiguous view is it.
        elem = abs(strides[-1]) or 1
    lo, hi = strided_reach(shape, strides)
    return lo, hi - lo + elem


def effects(op: m.Op, program: m.Program, signatures: Optional[dict] = None) -> OpEffects:
    """The byte ranges ``op`` reads and writes.

    Args:
        op: Any op.  IF and WHILE read their condition (4 bytes); their
            bodies are separate ops.
        program: The program the op belongs to (region sizes, annotations).
        signatures: ``{(module_hash, kernel_key): KernelSignature}`` to use
            for launches instead of the file's own (see :func:`kernel_signatures`;
            a caller may merge kernel annotations it built itself).

    Returns:
        An :class:`OpEffects`.
    """
    cls = type(op)
    if cls.ARGUMENT_REGIONS:
        sigs = kernel_signatures(program) if signatures is None else signatures
        return OpEffects(tuple(_launch_accesses(op, program, sigs.get((op.module_hash, op.kernel_key)))))
    out = []
    for ref in cls.REGIONS or ():
        rid = getattr(op, ref.region)
        if rid < 0:
            continue  # an absent optional reference (-1); the validator refuses other negative ids
        try:
            n = int(ref.nbytes(op))
        except (TypeError, ValueError, IndexError, KeyError):
            n = 0
        out.append(Access(rid, getattr(op, ref.offset) if ref.offset else 0, max(0, n), ref.mode(op), ref.role))
    return OpEffects(tuple(out))


__all__ = ["Access", "OpEffects", "effects", "kernel_signatures", "launch_argument", "launch_label", "argument_mode",
           "ADJOINT_MODES",
           "merge_modes", "READ_MODES", "WRITE_MODES", "array_field_dtype_name"]
