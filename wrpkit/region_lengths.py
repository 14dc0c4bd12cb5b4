"""The byte-length vocabulary of the op table: how many bytes a region reference spans, as data.

Each op class's ``REGIONS`` (:mod:`wrpkit.ops`) says its byte lengths with these terms; ``Length``
compiles a tree of them into one Python expression, with 64-bit checked arithmetic, and
``tools/gen_layout.py`` writes the same terms for the C++ evaluator
(``native/src/region_lengths.h``).
"""

from __future__ import annotations

from .apic_types import APIC_SCALAR_SIZE
from .records import record

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
    record, so the two agree by construction (``tests/formats/test_region_lengths.py``
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
    model, the record field ``record_field`` that says it in the file (a host-to-device memcpy's ``size``)."""

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
    A segmented sort's ends inferred from its starts alias the starts one int32 later."""

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
    or ``otherwise`` when the record carries no tail (a BSR transpose's capacity offsets)."""

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


__all__ = ["U64_MAX", "LengthError", "Length", "Fixed", "Field", "Len", "ScalarSize", "Sum", "Product", "Max",
           "Strided", "IfEq", "Adjacent", "TailLast", "LENGTH_KINDS"]
