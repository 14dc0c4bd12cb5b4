"""The typed model of a captured Warp program.

Every class here mirrors one table of ``schema/wrp.fbs`` field for field, with
the same names, so that the WRP1 codec (:mod:`wrpkit.formats.wrp1`), the FlatBuffers
codec (:mod:`wrpkit.formats.wrpk`) and the JSON form (:mod:`wrpkit.formats.jsonform`) are
plain mappings of one model.  The model holds content only: where a record
was found in a file is kept in ``at`` (not compared, not serialized) so that
tools can point at byte offsets.

Large byte fields (``Region.data``, ``Module.binary``) may be zero-copy
``memoryview`` slices of a memory-mapped file; nothing here copies them.
"""

from __future__ import annotations

import enum
from dataclasses import field, fields
from typing import ClassVar, NamedTuple, Optional, Union

from .records import record

Bytes = Union[bytes, bytearray, memoryview]


class DeviceType(enum.IntEnum):
    """Device family of a graph (Warp's ``APICDeviceType``)."""

    CUDA = 0
    CPU = 1


class OpType(enum.IntEnum):
    """Operation types of APIC format 18; names are Warp's ``APIC_OP_*`` names."""

    KERNEL_LAUNCH = 1
    MEMCPY_H2D = 2
    MEMCPY_D2H = 3
    MEMCPY_D2D = 4
    MEMSET = 5
    ALLOC = 6
    IF = 7
    WHILE = 8
    SCAN = 9
    MEMTILE = 10
    SEGMENTED_SORT = 11
    RADIX_SORT = 12
    RUNLENGTH_ENCODE = 13
    BSR_FROM_TRIPLETS = 14
    BSR_TRANSPOSE = 15
    REDUCTION = 16
    BVH_REFIT = 17
    BVH_REBUILD = 18
    HASH_GRID_UPDATE = 19


class RelocKind(enum.IntEnum):
    """What a relocation writes into an argument slot (``APICRelocKind``)."""

    DATA_PTR = 1
    HANDLE = 2
    NULL_PTR = 3


class ApicScalarType(enum.IntEnum):
    """Scalar types of sort, scan and reduction ops (``APICType``)."""

    INT32 = 1
    UINT32 = 2
    INT64 = 3
    UINT64 = 4
    FLOAT32 = 5
    FLOAT64 = 6


class ApicReductionKind(enum.IntEnum):
    """Kinds of the REDUCTION op (``APICReductionKind``, warp/native/apic_types.h)."""

    SUM = 1
    INNER = 2


#: Byte size of each ``APICType``.
APIC_SCALAR_SIZE = {1: 4, 2: 4, 3: 8, 4: 8, 5: 4, 6: 8}


class CudaBinaryKind(enum.IntEnum):
    NONE = 0
    PTX = 1
    CUBIN = 2


class CudaFallbackReason(enum.IntEnum):
    AVAILABLE = 0
    SOURCE_UNAVAILABLE = 1
    EXTERNAL_INCLUDES = 2
    LLVM_CUDA = 3
    LINK_INPUTS = 4
    EXPORT_FAILED = 5
    RECIPE_UNAVAILABLE = 6


# ---------------------------------------------------------------------------
# Metadata records
# ---------------------------------------------------------------------------


@record(slots=True)
class CudaCompileRecipe:
    """NVRTC options of a CUDA module; all zero for CPU modules."""

    debug: int = 0
    optimization_level: int = 0
    verify_fp: int = 0
    fast_math: int = 0
    fuse_fp: int = 0
    lineinfo: int = 0
    arch_suffix: int = 0


@record(slots=True)
class Module:
    """One compiled Warp module (a file in ``<stem>_modules/``)."""

    module_hash: str
    module_name: str
    binary_filename: str
    target_arch: int = 0
    binary_digest: str = ""
    source_filename: str = ""
    source_digest: str = ""
    binary_kind: int = CudaBinaryKind.NONE
    fallback_reason: int = CudaFallbackReason.SOURCE_UNAVAILABLE
    recipe: CudaCompileRecipe = field(default_factory=CudaCompileRecipe)
    #: The binary's bytes when the container carries them (``.wrpk``, JSON),
    #: else None: a ``.wrp`` keeps them in ``<stem>_modules/``.
    binary: Optional[Bytes] = field(default=None, compare=False, repr=False)
    #: The ``.cu`` source's bytes, when carried and ``source_filename`` is set.
    source: Optional[Bytes] = field(default=None, compare=False, repr=False)


@record(slots=True)
class Kernel:
    """A kernel that launches in the graph; (module_hash, kernel_key) is unique."""

    kernel_key: str
    module_hash: str
    forward_name: str
    backward_name: str = ""
    forward_smem_bytes: int = 0
    backward_smem_bytes: int = 0
    block_dim: int = 1


@record(slots=True)
class Binding:
    """A named graph parameter; it always covers a whole region."""

    name: str
    region_id: int


@record(slots=True)
class Mesh:
    """A ``wp.Mesh`` rebuilt at load from regions (``APICMeshRecord``)."""

    num_points: int
    num_tris: int
    support_winding_number: bool
    bvh_constructor: int
    bvh_leaf_size: int
    points_region_id: int
    indices_region_id: int
    velocities_region_id: int
    original_ptr: int


@record(slots=True)
class PointerLocation:
    """``count`` 8-byte handle slots at ``offset + i * stride`` in a region."""

    region_id: int
    offset: int
    stride: int
    count: int


@record(slots=True)
class Region:
    """One base allocation; ``data`` holds its initial bytes when present."""

    region_id: int
    element_size: int
    size: int
    has_initial_data: bool
    data: Optional[Bytes] = field(default=None, compare=False, repr=False)
    at: int = field(default=-1, compare=False, repr=False)


# ---------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------


class LaunchParam(NamedTuple):
    """One kernel argument's slice of ``value_data`` (``APICLaunchParamRecord``)."""

    param_index: int
    num_relocs: int
    value_offset: int
    value_size: int
    value_align: int


class LegacyArg(NamedTuple):
    """One argument of a format-3 launch (Warp 1.13's 88-byte ``APICLaunchParamRecord``).

    Format 3 describes each argument instead of recording its bytes: an array
    by region, offset, shape and strides; a scalar (struct, vector, handle)
    by its size in ``byte_offset`` and its bytes in ``shape`` and ``strides``
    (read here as eight little-endian int64).  Formats 10 and later record
    ``params``/``relocations``/``value_data`` instead.
    """

    is_array: int
    ndim: int
    param_index: int
    region_id: int
    byte_offset: int
    shape: tuple
    strides: tuple
    element_size: int

    def scalar_bytes(self) -> bytes:
        """The bytes of a scalar argument (``byte_offset`` of them, at most 64)."""
        import struct  # noqa: PLC0415

        raw = struct.pack("<8q", *self.shape, *self.strides)
        return raw[:min(self.byte_offset, 64)]


class Relocation(NamedTuple):
    """An 8-byte argument slot patched at replay (``APICLaunchPtrLocation``)."""

    value_byte_offset: int
    region_id: int
    region_offset: int
    kind: int


#: The largest byte length a reference may span: lengths are 64-bit, as in the C++ validator.
U64_MAX = (1 << 64) - 1


class LengthError(ValueError):
    """A region reference's byte length cannot be formed: a negative operand, or past 64 bits."""


def _negative(name: str, v: int):
    raise LengthError(f"{name} is negative ({v})")


def _overflow():
    raise LengthError("byte length overflows 64 bits")


class _Code:
    """Builds the Python expression of a length tree (fresh names for its temporaries)."""

    def __init__(self):
        self.n = 0

    def tmp(self) -> str:
        self.n += 1
        return f"_t{self.n}"

    def checked(self, expr: str) -> str:
        """``expr`` (of non-negative operands), refused past 64 bits."""
        t = self.tmp()
        return f"({t} if ({t} := {expr}) <= _U64 else _overflow())"


class Length:
    """How many bytes a region reference spans, as data: a small closed vocabulary.

    Each op class's ``REGIONS`` says its byte lengths with these terms
    (``Fixed(4)``, ``Field("size")``, ``4 * Field("nnz_upper_bound")``,
    ``Strided(...)``).  :meth:`evaluate` computes one for a model op, with
    64-bit checked arithmetic; ``tools/gen_layout.py`` writes the same terms
    into ``native/src/wrp1_layouts.h`` (``op_regions::kLengthNodes``), which
    one C++ function (``native/src/region_lengths.h``) evaluates the same way
    over the record's bytes.  Every term reads only fields of the op's own
    record, so the two agree by construction (``tests/test_region_lengths.py``
    holds them to each other).  ``LENGTH_KINDS`` lists the vocabulary.

    A tree is turned into one Python expression the first time it is
    evaluated (each term says its part, :meth:`code`), because ``wrp trace``
    forms every op's ranges within its per-op budget: walking the tree term
    by term costs several times more.
    """

    __slots__ = ("_fn",)

    def evaluate(self, op) -> int:
        """The length for ``op``.

        Raises:
            LengthError: An operand is negative or the result passes 64 bits.
        """
        return self.function(op)

    @property
    def function(self):
        """``function(op) -> int``: :meth:`evaluate` as one compiled expression (made once)."""
        try:
            return self._fn
        except AttributeError:
            src = f"lambda op: {self.code(_Code())}"
            fn = eval(src, {"_U64": U64_MAX, "_negative": _negative, "_overflow": _overflow,  # noqa: S307
                            "_SCALAR": APIC_SCALAR_SIZE})
            object.__setattr__(self, "_fn", fn)  # a cache, not a field: frozen terms stay equal by value
            return fn

    def code(self, c: _Code) -> str:  # pragma: no cover - every term overrides it
        """This term as a Python expression over ``op`` (operands checked as :meth:`evaluate` says)."""
        raise NotImplementedError

    def children(self) -> tuple:
        """The terms this one combines (empty for a leaf)."""
        return ()

    def __mul__(self, other):
        return Product(self, _as_length(other))

    def __rmul__(self, other):
        return Product(_as_length(other), self)

    def __add__(self, other):
        return Sum(self, _as_length(other))

    def __radd__(self, other):
        return Sum(_as_length(other), self)


def _as_length(v) -> Length:
    if isinstance(v, Length):
        return v
    if isinstance(v, int) and v >= 0:
        return Fixed(v)
    raise TypeError(f"{v!r} is not a byte length")


def _name(name: str) -> str:
    if not name.isidentifier():
        raise ValueError(f"{name!r} is not a field name")
    return name


@record(frozen=True, slots=True)
class Fixed(Length):
    """A constant number of bytes (or a constant factor)."""

    n: int

    def code(self, c: _Code) -> str:
        return str(int(self.n))


@record(frozen=True, slots=True)
class Field(Length):
    """The value of one record field (a count, a size, a stride); negative is an error."""

    name: str

    def code(self, c: _Code) -> str:
        t = c.tmp()
        return f"({t} if ({t} := op.{_name(self.name)}) >= 0 else _negative({self.name!r}, {t}))"


@record(frozen=True, slots=True)
class Len(Length):
    """The byte length of a variable part that follows the record: ``len(op.<model_field>)`` in the
    model, the record field ``record_field`` that says it in the file (MEMCPY_H2D's ``size``)."""

    model_field: str
    record_field: str

    def code(self, c: _Code) -> str:
        return f"len(op.{_name(self.model_field)})"


@record(frozen=True, slots=True)
class ScalarSize(Length):
    """The byte size of the ``APICType`` a field holds (0 for an unknown type, as the validators
    refuse it before they form a length)."""

    name: str

    def code(self, c: _Code) -> str:
        return f"_SCALAR.get(op.{_name(self.name)}, 0)"


@record(frozen=True, slots=True)
class _Pair(Length):
    """A term of two terms, ``a`` evaluated first."""

    a: Length
    b: Length

    def children(self) -> tuple:
        return (self.a, self.b)


@record(frozen=True, slots=True)
class Sum(_Pair):
    """``a + b``, checked."""

    def code(self, c: _Code) -> str:
        return c.checked(f"{self.a.code(c)} + {self.b.code(c)}")


@record(frozen=True, slots=True)
class Product(_Pair):
    """``a * b``, checked."""

    def code(self, c: _Code) -> str:
        return c.checked(f"{self.a.code(c)} * {self.b.code(c)}")


@record(frozen=True, slots=True)
class Max(_Pair):
    """The larger of ``a`` and ``b``."""

    def code(self, c: _Code) -> str:
        return f"max({self.a.code(c)}, {self.b.code(c)})"


@record(frozen=True, slots=True)
class Strided(Length):
    """``count`` elements ``stride`` bytes apart, each ``lanes`` scalars of ``scalar`` bytes:
    ``(count - 1) * stride + lanes * scalar``, 0 when count is 0 (then the other terms are not
    read: a scan of length 0 may record any stride).  The span Warp's replayer resolves."""

    count: Length
    stride: Length
    lanes: Length
    scalar: Length

    def code(self, c: _Code) -> str:
        n = c.tmp()
        span = c.checked(f"({n} - 1) * {self.stride.code(c)}")
        element = c.checked(f"{self.lanes.code(c)} * {self.scalar.code(c)}")
        return f"(0 if ({n} := {self.count.code(c)}) == 0 else {c.checked(f'{span} + {element}')})"

    def children(self) -> tuple:
        return (self.count, self.stride, self.lanes, self.scalar)


@record(frozen=True, slots=True)
class IfEq(Length):
    """``then`` when the record field ``name`` equals ``value``, else ``otherwise``."""

    name: str
    value: int
    then: Length
    otherwise: Length

    def code(self, c: _Code) -> str:
        return f"({self.then.code(c)} if op.{_name(self.name)} == {int(self.value)} else {self.otherwise.code(c)})"

    def children(self) -> tuple:
        return (self.then, self.otherwise)


@record(frozen=True, slots=True)
class Adjacent(Length):
    """1 when reference ``second`` starts ``gap`` bytes after reference ``first`` in the same region,
    else 0 (roles of the same op; their fields are ``<role>_region_id`` and ``<role>_offset``).
    SEGMENTED_SORT's ends inferred from its starts alias the starts one int32 later."""

    first: str
    second: str
    gap: int

    def fields(self) -> tuple:
        """``(first region, first offset, second region, second offset)`` field names."""
        return (self.first + "_region_id", self.first + "_offset", self.second + "_region_id",
                self.second + "_offset")

    def code(self, c: _Code) -> str:
        ra, oa, rb, ob = (_name(f) for f in self.fields())
        return f"int(op.{ra} == op.{rb} and op.{ob} - op.{oa} == {int(self.gap)})"


@record(frozen=True, slots=True)
class TailLast(Length):
    """The last int32 of the record's variable tail (``model_field`` in the model; never below 0),
    or ``otherwise`` when the record carries no tail (BSR_TRANSPOSE's capacity offsets)."""

    model_field: str
    otherwise: Length

    def code(self, c: _Code) -> str:
        t = c.tmp()
        return (f"(max(0, int({t}[-1])) if len({t} := op.{_name(self.model_field)}) "
                f"else {self.otherwise.code(c)})")

    def children(self) -> tuple:
        return (self.otherwise,)


#: The whole vocabulary of byte lengths: the C++ evaluator has one case per kind.
LENGTH_KINDS = (Fixed, Field, Len, ScalarSize, Sum, Product, Max, Strided, IfEq, Adjacent, TailLast)

#: Op types whose regions no ``Length`` describes, and why: the only exceptions to the table.
LENGTHS_ELSEWHERE = {
    OpType.KERNEL_LAUNCH: "its regions are its array arguments: each range is the array descriptor's "
                          "shape and strides in the argument bytes (wrpkit.checks.effects, launch checks)",
}


#: What an op does to the bytes a region reference names.
ACCESS_MODES = ("read", "write", "readwrite")


class RegionRef(NamedTuple):
    """One region an op record points at, the bytes it spans and what the op does there.

    This is the op table's entry for one region reference: every tool that asks
    what an op reads or writes (``wrpkit.checks.effects``) reads these.  The
    byte sizes are the spans Warp's replayer resolves (``warp/native/apic.cpp``,
    ``resolve_ptr``); ``tests/test_effects.py`` holds the validator's bounds
    checks to them.

    Attributes:
        role: Short name of the reference (``"dst"``, ``"keys"``), its fields' common prefix.
        region: Name of the field holding the region id.
        offset: Name of the field holding the byte offset in the region.
        length: How many bytes from ``offset`` the op touches, a :class:`Length` (data, so that
            the C++ validator's table is generated from it).
        access: ``"read"``, ``"write"`` or ``"readwrite"``, or a function of the op giving one.
        optional: A region id of -1 means the reference is absent.
    """

    role: str
    region: str
    offset: Optional[str]
    length: Length
    access: object
    optional: bool = False

    @property
    def nbytes(self):
        """``nbytes(op)``: how many bytes from ``offset`` this reference spans in ``op`` (its
        length's compiled function: ``wrp trace`` calls it for every op).

        Raises:
            LengthError: (from the call) An operand is negative or the length passes 64 bits.
        """
        return self.length.function

    def mode(self, op) -> str:
        """The access of this reference in ``op``."""
        return self.access(op) if callable(self.access) else self.access


@record(slots=True)
class Op:
    """Base of every operation; ``op_type`` is the Warp op number.

    Every op class also declares, as class data, its entry of the op table:
    ``REGIONS``, a tuple of :class:`RegionRef` (the region-id fields of its
    record, the byte range each spans, and whether the op reads or writes
    there).  A kernel launch instead takes its regions from its arguments
    (``ARGUMENT_REGIONS``).  ``tests/test_op_table.py`` fails when an op type
    lacks any part of its entry.
    """

    op_type: ClassVar[OpType]
    #: The op's region references (None: not declared -- a test refuses that).
    REGIONS: ClassVar[Optional[tuple]] = None
    #: Regions come from the kernel arguments' relocations (KERNEL_LAUNCH only).
    ARGUMENT_REGIONS: ClassVar[bool] = False
    #: Record fields that hold an enum, ``{field: IntEnum}`` (tools print them by name).
    ENUM_FIELDS: ClassVar[dict] = {"dtype": ApicScalarType}
    #: The op rebuilds every region it writes from scratch, past the bytes its
    #: ranges name (BSR assembly: a region's initial bytes there are never
    #: read, so ``wrp diff`` does not count them as a difference).
    REBUILDS_OUTPUTS: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return self.op_type.name


@record(slots=True)
class KernelLaunch(Op):
    """The ``KERNEL_LAUNCH`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.KERNEL_LAUNCH
    REGIONS: ClassVar[tuple] = ()
    ARGUMENT_REGIONS: ClassVar[bool] = True
    shape: tuple
    ndim: int
    size: int
    dim: int
    max_blocks: int
    block_dim: int
    smem_bytes: int
    grid_stride: int
    is_forward: bool
    cluster_dim: int
    kernel_key: str
    module_hash: str
    params: list
    adjoint_params: list
    relocations: list
    value_data: Bytes = field(repr=False)
    #: Format 3 only: the per-argument descriptors (empty in 10 and later).
    legacy_args: list = field(default_factory=list)
    #: Format 3 only: ``num_handle_offsets`` u32 entries (Warp 1.13 writes none).
    handle_offsets: list = field(default_factory=list)
    at: int = field(default=-1, compare=False, repr=False)

    def param_relocations(self, adjoint: bool = False):
        """Yield ``(param, [Relocation, ...])`` pairs in table order.

        Args:
            adjoint: Walk the adjoint bindings instead of the forward ones.
        """
        start = 0
        if adjoint:
            start = sum(p.num_relocs for p in self.params)
        for p in self.adjoint_params if adjoint else self.params:
            yield p, self.relocations[start : start + p.num_relocs]
            start += p.num_relocs


@record(slots=True)
class MemcpyH2D(Op):
    """The ``MEMCPY_H2D`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.MEMCPY_H2D
    REGIONS: ClassVar[tuple] = (
        RegionRef("dst", "dst_region_id", "dst_offset", Len("data", "size"), "write"),)
    dst_region_id: int
    dst_offset: int
    data: Bytes = field(repr=False)
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class MemcpyD2D(Op):
    """The ``MEMCPY_D2D`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.MEMCPY_D2D
    REGIONS: ClassVar[tuple] = (
        RegionRef("dst", "dst_region_id", "dst_offset", Field("size"), "write"),
        RegionRef("src", "src_region_id", "src_offset", Field("size"), "read"))
    dst_region_id: int
    src_region_id: int
    dst_offset: int
    src_offset: int
    size: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Memset(Op):
    """The ``MEMSET`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.MEMSET
    REGIONS: ClassVar[tuple] = (RegionRef("region", "region_id", "offset", Field("size"), "write"),)
    region_id: int
    value: int
    offset: int
    size: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Alloc(Op):
    """The ``ALLOC`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.ALLOC
    REGIONS: ClassVar[tuple] = (RegionRef("region", "region_id", None, Field("size"), "write"),)
    region_id: int
    size: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class If(Op):
    """The ``IF`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.IF
    REGIONS: ClassVar[tuple] = (RegionRef("cond", "cond_region_id", "cond_offset", Fixed(4), "read"),)
    cond_region_id: int
    cond_offset: int
    then_ops: list
    else_ops: list
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class While(Op):
    """The ``WHILE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.WHILE
    REGIONS: ClassVar[tuple] = (RegionRef("cond", "cond_region_id", "cond_offset", Fixed(4), "read"),)
    cond_region_id: int
    cond_offset: int
    body: list
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Scan(Op):
    """The ``SCAN`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.SCAN
    REGIONS: ClassVar[tuple] = (
        RegionRef("src", "src_region_id", "src_offset",
                  Strided(Field("length"), Field("in_stride"), Field("type_len"), ScalarSize("dtype")), "read"),
        RegionRef("dst", "dst_region_id", "dst_offset",
                  Strided(Field("length"), Field("out_stride"), Field("type_len"), ScalarSize("dtype")),
                  "write"))
    dst_region_id: int
    src_region_id: int
    dst_offset: int
    src_offset: int
    length: int
    in_stride: int
    out_stride: int
    type_len: int
    dtype: int
    inclusive: bool
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Memtile(Op):
    """The ``MEMTILE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.MEMTILE
    REGIONS: ClassVar[tuple] = (
        RegionRef("region", "region_id", "offset", Field("count") * Len("value", "srcsize"), "write"),)
    region_id: int
    offset: int
    count: int
    value: Bytes
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class SegmentedSort(Op):
    """The ``SEGMENTED_SORT`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.SEGMENTED_SORT
    # keys and values hold 2 x count elements: the second half is the sort's scratch.
    REGIONS: ClassVar[tuple] = (
        RegionRef("keys", "keys_region_id", "keys_offset", 8 * Field("count"), "readwrite"),
        RegionRef("values", "values_region_id", "values_offset", 8 * Field("count"), "readwrite"),
        # ends inferred from starts alias the starts one int32 later: the starts then span one more
        RegionRef("segstart", "segstart_region_id", "segstart_offset",
                  4 * (Field("num_segments") + Adjacent("segstart", "segend", 4)), "read"),
        RegionRef("segend", "segend_region_id", "segend_offset", 4 * Field("num_segments"), "read"))
    keys_region_id: int
    values_region_id: int
    segstart_region_id: int
    segend_region_id: int
    keys_offset: int
    values_offset: int
    segstart_offset: int
    segend_offset: int
    count: int
    num_segments: int
    dtype: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class RadixSort(Op):
    """The ``RADIX_SORT`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.RADIX_SORT
    REGIONS: ClassVar[tuple] = (
        RegionRef("keys", "keys_region_id", "keys_offset",
                  2 * Field("count") * ScalarSize("dtype"), "readwrite"),
        RegionRef("values", "values_region_id", "values_offset", 2 * Field("count") * Field("value_size"),
                  "readwrite"))
    keys_region_id: int
    values_region_id: int
    keys_offset: int
    values_offset: int
    count: int
    begin_bit: int
    end_bit: int
    value_size: int
    dtype: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class RunlengthEncode(Op):
    """The ``RUNLENGTH_ENCODE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.RUNLENGTH_ENCODE
    REGIONS: ClassVar[tuple] = (
        RegionRef("values", "values_region_id", "values_offset", 4 * Field("value_count"), "read"),
        RegionRef("run_values", "run_values_region_id", "run_values_offset", 4 * Field("value_count"),
                  "write"),
        RegionRef("run_lengths", "run_lengths_region_id", "run_lengths_offset", 4 * Field("value_count"),
                  "write"),
        RegionRef("run_count", "run_count_region_id", "run_count_offset", Fixed(4), "write"))
    values_region_id: int
    run_values_region_id: int
    run_lengths_region_id: int
    run_count_region_id: int
    values_offset: int
    run_values_offset: int
    run_lengths_offset: int
    run_count_offset: int
    value_count: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class BsrFromTriplets(Op):
    """The ``BSR_FROM_TRIPLETS`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.BSR_FROM_TRIPLETS
    REBUILDS_OUTPUTS: ClassVar[bool] = True
    # A masked topology reads the destination's offsets and columns as the mask before rewriting them.
    REGIONS: ClassVar[tuple] = (
        RegionRef("tpl_nnz", "tpl_nnz_region_id", "tpl_nnz_offset", Fixed(4), "read", True),
        RegionRef("tpl_rows", "tpl_rows_region_id", "tpl_rows_offset", 4 * Field("nnz_upper_bound"), "read"),
        RegionRef("tpl_columns", "tpl_columns_region_id", "tpl_columns_offset", 4 * Field("nnz_upper_bound"),
                  "read"),
        RegionRef("tpl_values", "tpl_values_region_id", "tpl_values_offset",
                  Field("nnz_upper_bound") * Field("block_size") * Field("scalar_size_in_bytes"), "read", True),
        RegionRef("summed_block_offsets", "summed_block_offsets_region_id", "summed_block_offsets_offset",
                  4 * Field("nnz_upper_bound"), "write"),
        RegionRef("summed_block_indices", "summed_block_indices_region_id", "summed_block_indices_offset",
                  4 * Field("nnz_upper_bound"), "write"),
        RegionRef("bsr_offsets", "bsr_offsets_region_id", "bsr_offsets_offset", 4 * (Field("row_count") + 1),
                  lambda op: "readwrite" if op.masked_topology else "write"),
        RegionRef("bsr_row_counts", "bsr_row_counts_region_id", "bsr_row_counts_offset",
                  4 * Field("row_count"), "read", True),
        RegionRef("bsr_columns", "bsr_columns_region_id", "bsr_columns_offset", 4 * Field("nnz_upper_bound"),
                  lambda op: "readwrite" if op.masked_topology else "write"),
        # formats 13-15 only: where the replay writes the block count (-1 from 16 on)
        RegionRef("bsr_nnz", "bsr_nnz_region_id", "bsr_nnz_offset", Fixed(4), "write", True))
    block_size: int
    scalar_size_in_bytes: int
    row_count: int
    col_count: int
    nnz_upper_bound: int
    masked_topology: bool
    scalar_zero_mask: int
    tpl_nnz_region_id: int
    tpl_rows_region_id: int
    tpl_columns_region_id: int
    tpl_values_region_id: int
    summed_block_offsets_region_id: int
    summed_block_indices_region_id: int
    bsr_offsets_region_id: int
    bsr_row_counts_region_id: int
    bsr_columns_region_id: int
    bsr_nnz_region_id: int
    tpl_nnz_offset: int
    tpl_rows_offset: int
    tpl_columns_offset: int
    tpl_values_offset: int
    summed_block_offsets_offset: int
    summed_block_indices_offset: int
    bsr_offsets_offset: int
    bsr_row_counts_offset: int
    bsr_columns_offset: int
    bsr_nnz_offset: int
    at: int = field(default=-1, compare=False, repr=False)


#: A BSR transpose's destination capacity in blocks: the last of the capacity offsets a padded
#: destination records (from format 14), else the source's nnz bound.
_TRANSPOSE_CAPACITY = TailLast("padded_tail", Field("nnz_upper_bound"))


@record(slots=True)
class BsrTranspose(Op):
    """The ``BSR_TRANSPOSE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.BSR_TRANSPOSE
    REBUILDS_OUTPUTS: ClassVar[bool] = True
    # A padded destination (transposed row counts given) sizes its columns by the recorded capacity tail.
    REGIONS: ClassVar[tuple] = (
        RegionRef("bsr_offsets", "bsr_offsets_region_id", "bsr_offsets_offset", 4 * (Field("row_count") + 1),
                  "read"),
        RegionRef("bsr_row_counts", "bsr_row_counts_region_id", "bsr_row_counts_offset",
                  4 * Field("row_count"), "read", True),
        RegionRef("bsr_columns", "bsr_columns_region_id", "bsr_columns_offset", 4 * Field("nnz_upper_bound"),
                  "read"),
        RegionRef("transposed_offsets", "transposed_offsets_region_id", "transposed_offsets_offset",
                  4 * (Field("col_count") + 1), "write"),
        RegionRef("transposed_row_counts", "transposed_row_counts_region_id", "transposed_row_counts_offset",
                  4 * Field("col_count"), "write", True),
        RegionRef("transposed_columns", "transposed_columns_region_id", "transposed_columns_offset",
                  4 * _TRANSPOSE_CAPACITY, "write"),
        RegionRef("block_indices", "block_indices_region_id", "block_indices_offset",
                  4 * Max(Field("nnz_upper_bound"), _TRANSPOSE_CAPACITY), "write"),
        RegionRef("status", "status_region_id", "status_offset", Fixed(4), "write", True))
    row_count: int
    col_count: int
    nnz_upper_bound: int
    bsr_offsets_region_id: int
    bsr_row_counts_region_id: int
    bsr_columns_region_id: int
    transposed_offsets_region_id: int
    transposed_row_counts_region_id: int
    transposed_columns_region_id: int
    block_indices_region_id: int
    status_region_id: int
    bsr_offsets_offset: int
    bsr_row_counts_offset: int
    bsr_columns_offset: int
    transposed_offsets_offset: int
    transposed_row_counts_offset: int
    transposed_columns_offset: int
    block_indices_offset: int
    status_offset: int
    padded_tail: tuple
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Reduction(Op):
    """The ``REDUCTION`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.REDUCTION
    ENUM_FIELDS: ClassVar[dict] = {"dtype": ApicScalarType, "kind": ApicReductionKind}
    # SUM (kind 1) has no second input (region -1) and writes type_len scalars; INNER writes one.
    REGIONS: ClassVar[tuple] = (
        RegionRef("input_a", "input_a_region_id", "input_a_offset",
                  Strided(Field("count"), Field("input_a_stride"), Field("type_len"), ScalarSize("dtype")),
                  "read"),
        RegionRef("input_b", "input_b_region_id", "input_b_offset",
                  Strided(Field("count"), Field("input_b_stride"), Field("type_len"), ScalarSize("dtype")),
                  "read", True),
        RegionRef("output", "output_region_id", "output_offset",
                  IfEq("kind", ApicReductionKind.SUM, Field("type_len"), Fixed(1)) * ScalarSize("dtype"), "write"))
    input_a_region_id: int
    input_b_region_id: int
    output_region_id: int
    count: int
    input_a_offset: int
    input_b_offset: int
    output_offset: int
    input_a_stride: int
    input_b_stride: int
    type_len: int
    kind: int
    dtype: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class BvhRefit(Op):
    """The ``BVH_REFIT`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.BVH_REFIT
    #: A BVH refit works on process-local handles, not regions.
    REGIONS: ClassVar[tuple] = ()
    bvh_id: int
    constructor_type: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class BvhRebuild(Op):
    """The ``BVH_REBUILD`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.BVH_REBUILD
    #: A BVH rebuild works on process-local handles, not regions.
    REGIONS: ClassVar[tuple] = ()
    bvh_id: int
    constructor_type: int
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class HashGridUpdate(Op):
    """The ``HASH_GRID_UPDATE`` op (the fields of Warp's APIC record)."""

    op_type: ClassVar[OpType] = OpType.HASH_GRID_UPDATE
    # Points are vec3f (12 bytes) every points_stride bytes; groups int32 every groups_stride bytes.  The
    # grid itself is a process-local handle, not a region: the op writes no region.
    REGIONS: ClassVar[tuple] = (
        RegionRef("points", "points_region_id", "points_offset",
                  Strided(Field("point_count"), Field("points_stride"), Fixed(1), Fixed(12)), "read"),
        RegionRef("groups", "groups_region_id", "groups_offset",
                  IfEq("has_groups", 0, Fixed(0), Strided(Field("point_count"), Field("groups_stride"), Fixed(1), Fixed(4))),
                  "read", True))
    grid_id: int
    cell_width: float
    points_region_id: int
    groups_region_id: int
    points_offset: int
    groups_offset: int
    point_count: int
    points_stride: int
    groups_stride: int
    grid_type: int
    has_groups: bool
    at: int = field(default=-1, compare=False, repr=False)


#: Model class of each op type that a file may hold (3 is reserved by Warp).
OP_CLASSES: dict = {
    cls.op_type: cls
    for cls in (
        KernelLaunch,
        MemcpyH2D,
        MemcpyD2D,
        Memset,
        Alloc,
        If,
        While,
        Scan,
        Memtile,
        SegmentedSort,
        RadixSort,
        RunlengthEncode,
        BsrFromTriplets,
        BsrTranspose,
        Reduction,
        BvhRefit,
        BvhRebuild,
        HashGridUpdate,
    )
}


def op_table() -> dict:
    """The op table, as data: for each op type its record fields and region references.

    Returns:
        ``{OpType: {"class": cls, "fields": [names], "regions": [RegionRef, ...],
        "argument_regions": bool, "reads": [region fields], "writes": [region fields]}}``;
        a reference whose access depends on the record (a masked BSR topology)
        is listed under both.
    """
    out = {}
    for t, cls in OP_CLASSES.items():
        refs = tuple(cls.REGIONS or ())
        reads, writes = [], []
        for r in refs:
            modes = {"readwrite"} if callable(r.access) else {r.access}
            if modes & {"read", "readwrite"}:
                reads.append(r.region)
            if modes & {"write", "readwrite"}:
                writes.append(r.region)
        out[t] = {"class": cls, "fields": op_fields(cls), "regions": list(refs),
                  "argument_regions": cls.ARGUMENT_REGIONS, "reads": reads, "writes": writes}
    return out


def op_fields(cls) -> list:
    """Names of an op class's content fields, in schema order (``at`` excluded)."""
    return [f.name for f in fields(cls) if f.name != "at"]


def nested_bodies(op: Op) -> list:
    """The nested op lists of a conditional op (empty for other ops)."""
    if isinstance(op, If):
        return [op.then_ops, op.else_ops]
    if isinstance(op, While):
        return [op.body]
    return []


def walk_ops(ops, depth: int = 0):
    """Yield ``(depth, op)`` for every op, nested bodies included, in stream order."""
    stack = [(depth, iter(ops))]
    while stack:
        d, it = stack[-1]
        op = next(it, None)
        if op is None:
            stack.pop()
            continue
        yield d, op
        # Pushed in reverse so that the first body is walked first.
        for body in reversed(nested_bodies(op)):
            stack.append((d + 1, iter(body)))


# ---------------------------------------------------------------------------
# The whole program
# ---------------------------------------------------------------------------


@record(slots=True)
class Program:
    """A captured Warp program: everything a ``.wrp`` file holds.

    ``annotations`` keeps wrpkit's extra section (an ``Annotations``
    FlatBuffer) as raw bytes so that round trips stay byte-identical; use
    :func:`wrpkit.formats.annotations.read_annotations` to read it.
    """

    format_version: int
    warp_version: str
    device_type: int
    target_arch: int
    modules: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    bindings: list = field(default_factory=list)
    meshes: list = field(default_factory=list)
    pointer_locations: list = field(default_factory=list)
    regions: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    annotations: bytes = b""
    #: Answers derived from the fields, kept with the program they describe (``checks/effects``'
    #: region sizes and kernel signatures): a module-level cache keyed by ``id()`` held every
    #: program's regions, and so its data, alive. Not an init field: ``dataclasses.replace`` starts empty.
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda"``."""
        return "cpu" if self.device_type == DeviceType.CPU else "cuda"

    def region(self, region_id: int) -> Optional[Region]:
        """The region with this id, or None."""
        for r in self.regions:
            if r.region_id == region_id:
                return r
        return None

    def region_map(self) -> dict:
        """``{region_id: Region}``."""
        return {r.region_id: r for r in self.regions}

    def binding_map(self) -> dict:
        """``{name: region_id}``, one entry per binding name, in first-written order.

        A name written more than once (an in-place binding, or a graph that
        ``capture_save`` saved twice) resolves as Warp's loader resolves it:
        the last record wins (``graph->bindings[name] = region_id`` in
        ``apic.cpp``).
        """
        out: dict = {}
        for b in self.bindings:
            out[b.name] = b.region_id
        return out

    def resolved_bindings(self) -> list:
        """One :class:`Binding` per name, in first-written order, each with the region Warp's loader uses."""
        return [Binding(n, r) for n, r in self.binding_map().items()]

    def required_module_files(self) -> list:
        """The module files Warp's loader needs, in first-use order.

        On CPU, the binaries of the modules the kernels are in (Warp loads
        only those); on CUDA, every module's binary.  Exported ``.cu``
        sources are never required: they serve only Warp's compile fallback.
        wrp-replay applies the same rule (``required_module_files`` in
        native/src/module_files.cpp).
        """
        names: list = []
        if self.device_type == DeviceType.CPU:
            by_hash = {mod.module_hash: mod for mod in self.modules}
            for k in self.kernels:
                mod = by_hash.get(k.module_hash)
                if mod is not None and mod.binary_filename not in names:
                    names.append(mod.binary_filename)
        else:
            for mod in self.modules:
                if mod.binary_filename not in names:
                    names.append(mod.binary_filename)
        return names

    def optional_module_files(self) -> list:
        """Files a loader passes to Warp when present but does not require:
        the exported ``.cu`` sources of a CUDA capture (for Warp's compile
        fallback).  None on CPU."""
        if self.device_type == DeviceType.CPU:
            return []
        return [mod.source_filename for mod in self.modules if mod.source_filename]

    def op_counts(self) -> dict:
        """Count of each op name over all nesting depths, in op-number order."""
        counts: dict = {}
        for _, op in walk_ops(self.ops):
            counts[op.op_type] = counts.get(op.op_type, 0) + 1
        return {OpType(k).name: counts[k] for k in sorted(counts)}

    def launch_counts(self) -> dict:
        """``{(module_hash, kernel_key): launches}`` over all nesting depths."""
        counts: dict = {}
        for _, op in walk_ops(self.ops):
            if isinstance(op, KernelLaunch):
                key = (op.module_hash, op.kernel_key)
                counts[key] = counts.get(key, 0) + 1
        return counts


# ---------------------------------------------------------------------------
# Binding roles
# ---------------------------------------------------------------------------


def binding_split(names: list) -> Optional[tuple]:
    """Where ``capture_save``'s inputs end and its outputs begin in a binding list.

    Warp writes the names of ``inputs=`` and then those of ``outputs=``, each
    a dict (so each run has unique names); a name in both (an in-place
    array) is written twice.  A split ``k`` is valid when ``names[:k]`` and
    ``names[k:]`` each hold no name twice.

    Args:
        names: Binding names in file order.

    Returns:
        ``(lo, hi)``, the range of valid splits (inclusive), or None when no
        split is valid: the list is not one ``capture_save``'s (for example
        ``capture_save`` was called twice on one graph, repeating every name).
    """
    seen: set = set()
    prefix = 0
    for n in names:
        if n in seen:
            break
        seen.add(n)
        prefix += 1
    seen = set()
    suffix = 0
    for n in reversed(names):
        if n in seen:
            break
        seen.add(n)
        suffix += 1
    lo, hi = len(names) - suffix, prefix
    return (lo, hi) if lo <= hi else None


def binding_roles(names: list) -> dict:
    """``{name: (is_input, is_output)}`` as far as a stock binding list tells, one entry per name.

    A name written twice is both; a name written once is an input when it
    comes before every valid split, an output when after, and ``None`` (not
    known) for both when the list does not tell (a file without wrpkit's
    signature and without in-place bindings).

    Args:
        names: Binding names in file order.
    """
    split = binding_split(names)
    out: dict = {}
    for i, n in enumerate(names):
        if n in out:
            out[n] = (True, True)
        elif split is None:
            out[n] = (None, None)
        elif i < split[0]:
            out[n] = (True, False)
        elif i >= split[1]:
            out[n] = (False, True)
        else:
            out[n] = (None, None)
    return out
