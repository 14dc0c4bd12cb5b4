"""wrpkit's annotations of a capture: typed binding signatures, kernel
signatures and module digests.

Warp records a binding as a bare region of bytes.  wrpkit adds what it knows
at capture time in an ``Annotations`` FlatBuffer (``schema/wrp.fbs``, file
identifier ``"WRPK"``), stored as raw bytes in :attr:`wrpkit.model.Program.annotations`
(an extra WRP1 section that Warp's loader skips, or a field of a ``.wrpk``).

This module maps that FlatBuffer to small frozen records (:func:`wrpkit.records.record`)
(:class:`DataType`, :class:`ArraySignature`, ...), and maps data types to
numpy (:func:`numpy_dtype`, :func:`element_layout`, :func:`view_region`).
Nothing here imports Warp: the mapping from and to Warp types is
:mod:`wrpkit.run.warp_bridge.dtypes`.
"""

from __future__ import annotations

import enum
import functools
from typing import Optional



class _LazyNumpy:
    """numpy, imported on first use: reading annotations (``wrp inspect``) needs no numpy."""

    def __getattr__(self, name):
        import numpy  # noqa: PLC0415

        return getattr(numpy, name)


np = _LazyNumpy()

from ..records import field, record
from ..errors import WrpBindingError, WrpFormatError
from .fbs.ArgumentAccess import ArgumentAccess as _SchemaArgumentAccess
from .fbs.ScalarKind import ScalarKind as _SchemaScalarKind

#: FlatBuffers file identifier of an Annotations buffer.
FILE_IDENTIFIER = b"WRPK"


#: Scalar kinds of Warp data types, taken from the schema so that the values cannot drift.
ScalarKind = enum.IntEnum("ScalarKind", {k: v for k, v in vars(_SchemaScalarKind).items() if not k.startswith("_")})

#: What a kernel does with an array argument (schema enum ``ArgumentAccess``).
ArgumentAccess = enum.IntEnum("ArgumentAccess",
                              {k: v for k, v in vars(_SchemaArgumentAccess).items() if not k.startswith("_")})

#: The word each access reads as in tools; UNKNOWN is None ("touches": may read and write).
ACCESS_WORDS = {ArgumentAccess.READ: "read", ArgumentAccess.WRITE: "write",
                ArgumentAccess.READ_WRITE: "readwrite", ArgumentAccess.UNUSED: "unused"}


#: numpy dtype string of each scalar kind (little-endian: WRP1 is little-endian only).
_SCALAR_CODES = {
    ScalarKind.BOOL: "?", ScalarKind.INT8: "<i1", ScalarKind.UINT8: "<u1", ScalarKind.INT16: "<i2",
    ScalarKind.UINT16: "<u2", ScalarKind.INT32: "<i4", ScalarKind.UINT32: "<u4", ScalarKind.INT64: "<i8",
    ScalarKind.UINT64: "<u8", ScalarKind.FLOAT16: "<f2", ScalarKind.FLOAT32: "<f4", ScalarKind.FLOAT64: "<f8",
}


#: Byte size of each scalar kind (from its numpy type code, without importing numpy).
SCALAR_SIZES = {k: 1 if code == "?" else int(code[2:]) for k, code in _SCALAR_CODES.items()}


def strided_reach(shape, strides) -> tuple:
    """``(lo, hi)``: byte offsets, relative to element 0, of the lowest and highest element of a
    non-empty strided view (negative strides reach below element 0)."""
    lo = hi = 0
    for d, st in zip(shape, strides):
        span = (d - 1) * st
        if span < 0:
            lo += span
        else:
            hi += span
    return lo, hi


@functools.lru_cache(maxsize=None)
def scalar_numpy() -> dict:
    """``{ScalarKind: numpy dtype}`` (built on first use, so that importing this module needs no numpy)."""
    return {k: np.dtype(code) for k, code in _SCALAR_CODES.items()}

#: Warp scalar type name of each scalar kind.
SCALAR_NAMES = {
    ScalarKind.BOOL: "bool",
    ScalarKind.INT8: "int8",
    ScalarKind.UINT8: "uint8",
    ScalarKind.INT16: "int16",
    ScalarKind.UINT16: "uint16",
    ScalarKind.INT32: "int32",
    ScalarKind.UINT32: "uint32",
    ScalarKind.INT64: "int64",
    ScalarKind.UINT64: "uint64",
    ScalarKind.FLOAT16: "float16",
    ScalarKind.FLOAT32: "float32",
    ScalarKind.FLOAT64: "float64",
}


# ---------------------------------------------------------------------------
# The dataclasses
# ---------------------------------------------------------------------------


@record(frozen=True)
class StructField:
    """One field of a ``@wp.struct`` element type."""

    name: str
    offset: int
    type: "DataType"


@record(frozen=True)
class DataType:
    """The element type of an array or of a struct field.

    Attributes:
        name: Warp's name: ``"float32"``, ``"vec3f"``, ``"mat33d"``,
            ``"transformf"``, or a struct's qualified name.
        scalar: The :class:`ScalarKind` of a scalar, vector, matrix,
            quaternion or transform; ``UNKNOWN`` for structs.
        shape: ``()`` for scalars, ``(n,)`` for vectors, quaternions and
            transforms, ``(rows, cols)`` for matrices.
        size: Byte size of one element.
        fields: Struct fields in declaration order; empty unless a struct.
    """

    name: str
    scalar: int = ScalarKind.UNKNOWN
    shape: tuple = ()
    size: int = 0
    fields: tuple = ()

    @property
    def is_struct(self) -> bool:
        return bool(self.fields)

    @property
    def is_scalar(self) -> bool:
        return self.scalar != ScalarKind.UNKNOWN and not self.shape

    def __str__(self) -> str:
        return self.name


@record(frozen=True)
class ArraySignature:
    """The typed view of one binding: what ``Program.run`` returns for it.

    Attributes:
        name: Binding name.
        dtype: Element type.
        shape: Array shape, outermost first.
        strides: Byte strides, outermost first.
        byte_offset: Byte offset of element 0 inside the binding's region.
        is_input: Bound through ``inputs=``.
        is_output: Bound through ``outputs=``.
    """

    name: str
    dtype: DataType
    shape: tuple
    strides: tuple
    byte_offset: int = 0
    is_input: bool = False
    is_output: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def is_contiguous(self) -> bool:
        expected = self.dtype.size
        for d, s in zip(reversed(self.shape), reversed(self.strides)):
            if d > 1 and s != expected:
                return False
            expected *= d
        return True

    def extent(self) -> tuple:
        """``(lowest, highest)`` byte offsets touched in the region, end exclusive."""
        if self.size == 0:
            return self.byte_offset, self.byte_offset
        lo, hi = strided_reach(self.shape, self.strides)
        return self.byte_offset + lo, self.byte_offset + hi + self.dtype.size

    def numpy_shape(self) -> tuple:
        """Shape of the numpy array: the array shape plus the element's trailing dims."""
        return tuple(self.shape) + element_layout(self.dtype)[1]

    def numpy_dtype(self) -> np.dtype:
        """Scalar (or structured) numpy dtype of the numpy array."""
        return element_layout(self.dtype)[0]


@record(frozen=True)
class KernelArgument:
    """One argument of a kernel, as declared in Python."""

    name: str
    type: str
    value_size: int = 0
    dtype: Optional[DataType] = None
    ndim: int = 0
    #: What the kernel does with the array (:class:`ArgumentAccess`); UNKNOWN when not recorded.
    access: int = 0

    @property
    def access_word(self) -> Optional[str]:
        """``"read"``, ``"write"``, ``"readwrite"``, ``"unused"``, or None when unknown."""
        try:
            return ACCESS_WORDS.get(ArgumentAccess(self.access))
        except ValueError:
            return None


@record(frozen=True)
class KernelSignature:
    """A kernel's argument list."""

    kernel_key: str
    module_hash: str
    arguments: tuple = ()
    #: File of the kernel's ``def``, relative to the program's root when under it ("" when not recorded).
    source_file: str = ""
    #: 1-based line of the kernel's ``def`` in :attr:`source_file` (0 when not recorded).
    source_line: int = 0


@record(frozen=True)
class SourceFrame:
    """One frame of the Python stack that issued an op (schema table ``SourceFrame``)."""

    file: str
    line: int = 0
    function: str = ""


@record(frozen=True)
class CallSite:
    """Where one op was issued in the user's program (schema table ``CallSite``).

    ``op_path`` is the op's top-level index, then a ``(body, index)`` pair per
    IF/WHILE body it lies in (body 0: ``then_ops`` or a WHILE body; 1:
    ``else_ops``).  ``frames`` is the stack at the call, innermost first.
    """

    op_path: tuple
    frames: tuple = ()


@record(frozen=True)
class UnrecordedCall:
    """A call on a Warp structure that ran during a CPU capture but is not in the graph
    (schema table ``UnrecordedCall``): ``call`` as written (``"Mesh.refit()"``), ``frames`` innermost first."""

    call: str
    frames: tuple = ()


@record(frozen=True)
class ModuleDigest:
    """SHA-256 of one module file."""

    binary_filename: str
    sha256: bytes
    size: int

    @classmethod
    def of(cls, binary_filename: str, data) -> "ModuleDigest":
        import hashlib  # noqa: PLC0415  (OpenSSL's, ~3 ms to import: `wrp inspect` never hashes)

        mv = memoryview(data)
        return cls(binary_filename, hashlib.sha256(mv).digest(), mv.nbytes)

    def matches(self, data) -> bool:
        import hashlib  # noqa: PLC0415

        mv = memoryview(data)
        return mv.nbytes == self.size and hashlib.sha256(mv).digest() == self.sha256


@record(frozen=True)
class Annotations:
    """Everything wrpkit records about a capture beyond Warp's own records."""

    producer: str = ""
    signature: tuple = ()
    kernel_signatures: tuple = ()
    module_digests: tuple = field(default=())
    #: :class:`CallSite` of each op whose call was recorded, in stream order.
    call_sites: tuple = ()
    #: Name of the directory relative source paths start from ("" when none was recorded).
    source_root: str = ""
    #: :class:`UnrecordedCall` of each structure call the capture ran but Warp did not record.
    unrecorded_calls: tuple = ()

    def signature_map(self) -> dict:
        """``{binding name: ArraySignature}``."""
        return {s.name: s for s in self.signature}

    def kernel_map(self) -> dict:
        """``{(module_hash, kernel_key): KernelSignature}``: a kernel is its key and its module."""
        return {(k.module_hash, k.kernel_key): k for k in self.kernel_signatures}

    def digest_map(self) -> dict:
        """``{binary_filename: ModuleDigest}``."""
        return {d.binary_filename: d for d in self.module_digests}

    def kernel_signature(self, module_hash: str, kernel_key: str) -> Optional[KernelSignature]:
        for k in self.kernel_signatures:
            if k.module_hash == module_hash and k.kernel_key == kernel_key:
                return k
        return None


# ---------------------------------------------------------------------------
# numpy mapping
# ---------------------------------------------------------------------------


def element_layout(dt: DataType) -> tuple:
    """``(numpy dtype, trailing dims)`` of one element.

    Scalars map to their numpy scalar dtype with no trailing dims; vectors,
    quaternions, transforms and matrices to their scalar dtype with trailing
    dims ``(n,)`` or ``(rows, cols)`` (as ``wp.array.numpy()`` returns them);
    structs to a structured dtype laid out like the C struct.

    Raises:
        WrpFormatError: The data type is not representable.
    """
    if dt.fields:
        return numpy_dtype(dt), ()
    if dt.scalar != ScalarKind.UNKNOWN:
        base = scalar_numpy().get(dt.scalar)
        if base is None:
            raise WrpFormatError(f"data type {dt.name!r} has an unknown scalar kind {dt.scalar}")
        return base, tuple(int(d) for d in dt.shape)
    return numpy_dtype(dt), ()


def numpy_dtype(dt: DataType) -> np.dtype:
    """The numpy dtype of one element, as a single dtype.

    Vectors and matrices become subarray dtypes (``('<f4', (3,))``), which
    numpy expands into trailing dims when an array is built with them; structs
    become structured dtypes equal to Warp's ``Struct.numpy_dtype()``.

    Raises:
        WrpFormatError: The data type is not representable.
    """
    if dt.fields:
        names, formats, offsets = [], [], []
        for f in dt.fields:
            names.append(f.name)
            formats.append(numpy_dtype(f.type))
            offsets.append(int(f.offset))
        try:
            return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": int(dt.size)})
        except (ValueError, TypeError) as e:
            raise WrpFormatError(f"struct data type {dt.name!r} has an impossible layout: {e}") from None
    if dt.scalar != ScalarKind.UNKNOWN:
        base = scalar_numpy().get(dt.scalar)
        if base is None:
            raise WrpFormatError(f"data type {dt.name!r} has an unknown scalar kind {dt.scalar}")
        if dt.shape:
            return np.dtype((base, tuple(int(d) for d in dt.shape)))
        return base
    if dt.name == "bfloat16" and dt.size == 2:
        return np.dtype("<u2")  # as wp.array.numpy() returns bfloat16
    if dt.size <= 0:
        raise WrpFormatError(f"data type {dt.name!r} has no size")
    return np.dtype(f"V{int(dt.size)}")


def dtype_matches(sig_dtype: DataType, arr_dtype: np.dtype) -> bool:
    """Whether a numpy array of ``arr_dtype`` can be given for elements of ``sig_dtype``.

    Scalars, vectors and matrices need the same scalar dtype (byte order
    included); structs need a structured dtype of the same size and field names.
    """
    base, _ = element_layout(sig_dtype)
    arr_dtype = np.dtype(arr_dtype)
    if base.names is not None:
        return arr_dtype.itemsize == base.itemsize and (arr_dtype.names is None or arr_dtype.names == base.names)
    if arr_dtype.subdtype is not None:
        arr_dtype = arr_dtype.subdtype[0]
    return arr_dtype == base


def view_region(region: np.ndarray, sig: ArraySignature) -> np.ndarray:
    """A typed, shaped view of a binding's region bytes per its signature.

    Args:
        region: A 1-D ``uint8`` array holding the whole region.
        sig: The binding's signature.

    Returns:
        A view (no copy) with ``sig.numpy_shape()`` and ``sig.numpy_dtype()``
        that respects ``byte_offset`` and ``strides``.

    Raises:
        WrpBindingError: The signature does not fit the region.
    """
    check_fits(sig, region.nbytes)
    base, trailing = element_layout(sig.dtype)
    inner = []
    step = base.itemsize
    for d in reversed(trailing):
        inner.append(step)
        step *= d
    strides = tuple(int(s) for s in sig.strides) + tuple(reversed(inner))
    shape = tuple(int(d) for d in sig.shape) + trailing
    if sig.size == 0:
        return np.empty(shape, dtype=base)
    return np.ndarray(shape, dtype=base, buffer=region, offset=int(sig.byte_offset), strides=strides)


def check_fits(sig: ArraySignature, region_size: int) -> None:
    """Raise WrpBindingError when the signature's bytes lie outside a region of ``region_size`` bytes."""
    if len(sig.shape) != len(sig.strides):
        raise WrpBindingError(f"signature of {sig.name!r} has {len(sig.shape)} dims but {len(sig.strides)} strides")
    if any(d < 0 for d in sig.shape):
        raise WrpBindingError(f"signature of {sig.name!r} has a negative dimension {tuple(sig.shape)}")
    lo, hi = sig.extent()
    if lo < 0 or hi > region_size:
        raise WrpBindingError(
            f"signature of {sig.name!r} (shape {tuple(sig.shape)}, strides {tuple(sig.strides)}, "
            f"offset {sig.byte_offset}) spans bytes [{lo}, {hi}) but its region has {region_size} bytes",
            hint="The annotations do not describe this file; recapture it with wrpkit.")


# ---------------------------------------------------------------------------
# FlatBuffers codec
# ---------------------------------------------------------------------------


def encode_annotations(annotations: Optional[Annotations] = None, *, producer: Optional[str] = None,
                       signature=(), kernel_signatures=(), module_digests=(), call_sites=(),
                       source_root: str = "", unrecorded_calls=()) -> bytes:
    """Encode annotations as an ``Annotations`` FlatBuffer with identifier ``"WRPK"``.

    Pass either an :class:`Annotations` or its parts as keywords.

    Returns:
        The buffer's bytes, for :attr:`wrpkit.model.Program.annotations`.
    """
    from .annotations_codec import encode_annotations_buffer  # noqa: PLC0415

    if annotations is None:
        if producer is None:
            from .. import __version__  # noqa: PLC0415

            producer = f"wrpkit {__version__}"
        annotations = Annotations(producer, tuple(signature), tuple(kernel_signatures), tuple(module_digests),
                                  tuple(call_sites), source_root, tuple(unrecorded_calls))

    return encode_annotations_buffer(annotations)


def _named(table: str, vals: list) -> dict:
    """A table's field values (from :func:`~wrpkit.formats.wrpk.reader.annotation_tables`) by field name."""
    from .wrpk.schema_tables import TABLES  # noqa: PLC0415

    return {name: v for (name, _, _), v in zip(TABLES[table], vals)}


def _data_type(vals) -> Optional[DataType]:
    if not vals:  # absent (the reader gives an absent table field as an empty list)
        return None
    t = _named("DataType", vals)
    fields = []
    for f in t["fields"]:
        f = _named("StructField", f)
        fields.append(StructField(f["name"], int(f["offset"]), _data_type(f["type"]) or DataType("?")))
    scalar = int(t["scalar"])
    try:
        scalar = ScalarKind(scalar)
    except ValueError:
        pass
    return DataType(t["name"], scalar, tuple(int(d) for d in t["shape"]), int(t["size"]), tuple(fields))


def decode_annotations(data) -> Annotations:
    """Decode the bytes of an ``Annotations`` FlatBuffer.

    The buffer is verified as the C++ reader verifies it, and decoded in the
    same pass by wrpkit's own reader (no FlatBuffers runtime, so no numpy).

    Raises:
        WrpFormatError: The bytes are not a well-formed Annotations buffer.
    """
    from .wrpk.reader import annotation_tables  # noqa: PLC0415

    buf = bytes(data)
    if len(buf) < 8 or buf[4:8] != b"WRPK":
        raise WrpFormatError("the annotations are not an Annotations FlatBuffer (identifier 'WRPK' missing)",
                             field="annotations")
    root = _named("Annotations", annotation_tables(buf))
    try:
        return _annotations_from(root)
    except WrpFormatError:
        raise
    except Exception as e:  # noqa: BLE001  (untrusted bytes: any failure is a format error)
        raise WrpFormatError(f"the annotations are malformed ({type(e).__name__}: {e})", field="annotations") from None


def _annotations_from(root: dict) -> Annotations:
    sigs = []
    for s in root["signature"]:
        s = _named("ArraySignature", s)
        sigs.append(ArraySignature(
            name=s["name"],
            dtype=_data_type(s["dtype"]) or DataType("?"),
            shape=tuple(int(d) for d in s["shape"]),
            strides=tuple(int(d) for d in s["strides"]),
            byte_offset=int(s["byte_offset"]),
            is_input=bool(s["is_input"]),
            is_output=bool(s["is_output"]),
        ))
    ksigs = []
    for k in root["kernel_signatures"]:
        k = _named("KernelSignature", k)
        args = []
        for a in k["arguments"]:
            a = _named("KernelArgument", a)
            args.append(KernelArgument(a["name"], a["type"], int(a["value_size"]), _data_type(a["dtype"]),
                                       int(a["ndim"]), int(a["access"])))
        ksigs.append(KernelSignature(k["kernel_key"], k["module_hash"], tuple(args), k["source_file"],
                                     int(k["source_line"])))
    digests = []
    for d in root["module_digests"]:
        d = _named("ModuleDigest", d)
        digests.append(ModuleDigest(d["binary_filename"], bytes(d["sha256"]), int(d["size"])))
    sites = []
    for c in root["call_sites"]:
        c = _named("CallSite", c)
        sites.append(CallSite(tuple(int(i) for i in c["op_path"]), _source_frames(c["frames"])))
    unrecorded = []
    for u in root.get("unrecorded_calls") or ():
        u = _named("UnrecordedCall", u)
        unrecorded.append(UnrecordedCall(u["call"], _source_frames(u["frames"])))
    return Annotations(root["producer"], tuple(sigs), tuple(ksigs), tuple(digests), tuple(sites),
                       root["source_root"], tuple(unrecorded))


def _source_frames(vals) -> tuple:
    """The :class:`SourceFrame` records of a ``[SourceFrame]`` vector (call sites, unrecorded calls)."""
    out = []
    for f in vals:
        f = _named("SourceFrame", f)
        out.append(SourceFrame(f["file"], int(f["line"]), f["function"]))
    return tuple(out)


def read_annotations(program) -> Optional[Annotations]:
    """The annotations of a decoded program, or None when it has none.

    Args:
        program: A :class:`wrpkit.model.Program`.

    Raises:
        WrpFormatError: The program carries malformed annotations.
    """
    raw = getattr(program, "annotations", b"")
    if not raw:
        return None
    return decode_annotations(raw)


def argument_access(program) -> dict:
    """What each captured kernel does with each of its arguments, as recorded at capture.

    Args:
        program: A :class:`wrpkit.model.Program`.

    Returns:
        ``{(module_hash, kernel_key): [word per argument]}`` where each word is
        ``"read"``, ``"write"``, ``"readwrite"``, ``"unused"``, or None where
        the file does not say (files written before wrpkit recorded access,
        non-array arguments): tools then say "touches".  Empty when the file
        has no annotations.

    Raises:
        WrpFormatError: The program carries malformed annotations.
    """
    ann = read_annotations(program)
    if ann is None:
        return {}
    return {(k.module_hash, k.kernel_key): [a.access_word for a in k.arguments] for k in ann.kernel_signatures}


__all__ = [
    "ArgumentAccess", "ACCESS_WORDS", "argument_access", "ScalarKind", "DataType", "StructField", "ArraySignature", "KernelArgument", "KernelSignature",
    "SourceFrame", "CallSite", "UnrecordedCall",
    "ModuleDigest", "Annotations", "element_layout", "numpy_dtype", "dtype_matches", "view_region", "check_fits",
    "encode_annotations", "decode_annotations",
    "read_annotations", "FILE_IDENTIFIER", "scalar_numpy",
]
