"""``wrpkit.records.record`` makes classes that behave as ``dataclasses.dataclass`` makes them, without
importing ``dataclasses`` (every ``wrp`` command imports about sixty of them)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import field

import subprocess
import sys
import weakref

import pytest

from wrpkit import model as m
from wrpkit import records
from wrpkit.formats import annotations as ann
from wrpkit.records import record


def _classes(deco, frozen_deco, field=field):
    @deco
    class A:
        x: int
        y: float = 0.0
        z: list = field(default_factory=list, compare=False, repr=False)

    @deco
    class B(A):
        w: str = "w"

    @frozen_deco
    class F:
        a: int
        b: tuple = ()
        c: int = field(default=0, compare=False)

    @frozen_deco
    class G:
        pass

    @deco
    class OwnEq:
        v: int

        def __eq__(self, other):
            return "own"

    @frozen_deco
    class FrozenOwnEq:
        v: int

        def __eq__(self, other):
            return "own"

    return A, B, F, G, OwnEq, FrozenOwnEq


def _behaviour(deco, frozen_deco, field=field, replace=dataclasses.replace) -> list:
    A, B, F, G, OwnEq, FrozenOwnEq = _classes(deco, frozen_deco, field)
    nan = float("nan")
    a = A(1, nan)
    rows = [repr(a), a == a, a == A(1, nan), A(1) == A(1, 0.0, [1]), A(1) == B(1), B(1) == B(1, w="w"),
            A(1) != A(2), A(1).__eq__(3), repr(B(2, 3.0, [1], "q")),
            F(1, (2,)) == F(1, (2,), 5), hash(F(1, (2,))) == hash(F(1, (2,), 7)), hash(F(1, (2,))) == hash((1, (2,))),
            repr(G()), G() == G(), hash(G()) == hash(()), OwnEq(1) == OwnEq(1), FrozenOwnEq(1) == FrozenOwnEq(2),
            A.__hash__, OwnEq.__hash__, FrozenOwnEq.__hash__ is None, copy.copy(F(1)) == F(1),
            copy.deepcopy(B(3)) == B(3), repr(A.__dataclass_params__), repr(F.__dataclass_params__),
            [f.name for f in dataclasses.fields(B)], str(inspect.signature(B)), A.__match_args__,
            # Python 3.11.2's dataclass leaves the first class's __weakref__ descriptor in a slots class
            # (gh-102069, fixed in 3.11.3); record does as the fixed ones (test_slots_records_hold_no_weakref).
            getattr(A, "__slots__", None), sorted(k for k in vars(F) if k.startswith("__") and k != "__weakref__"),
            repr(replace(B(1, 2.0, [3], "v"), y=5.0)), replace(F(1, (2,), 3), a=4) == F(4, (2,)),
            copy.deepcopy(F(1, (2,), 3)).c, copy.copy(B(1, 2.0, [3], "v")).z, dataclasses.is_dataclass(B(1)),
            F.__doc__, A.__init__.__qualname__, str(inspect.signature(F.__init__)),
            [(f.name, f.type, f.init, f.repr, f.compare) for f in dataclasses.fields(F)],
            [f.name for f in dataclasses.fields(B(1))]]
    with pytest.raises(ValueError) as info:
        deco(type("M", (), {"__annotations__": {"x": "list"}, "x": []}))
    rows.append(str(info.value))
    with pytest.raises(TypeError) as info:
        replace(B(1), nope=1)
    rows.append(type(info.value).__name__)
    # A frozen class's __setattr__/__delattr__ (records.py shares them on 3.10-3.12): fields and other names.
    for action in (lambda: setattr(F(1), "a", 2), lambda: hash(A(1)), lambda: setattr(F(1), "zz", 2),
                   lambda: delattr(F(1), "a"), lambda: delattr(F(1), "zz")):
        with pytest.raises((TypeError, AttributeError)) as info:
            action()
        rows.append(f"{type(info.value).__name__}: {info.value}")
    rows.append(F.__setattr__.__qualname__ + " " + F.__delattr__.__qualname__)
    looped = A(1)
    looped.y = looped
    rows.append(repr(looped))
    return rows


@pytest.mark.parametrize("slots", [True, False], ids=["slots", "dict"])
@pytest.mark.parametrize("fields_from", ["records", "dataclasses"])
def test_record_behaves_as_dataclass(slots, fields_from):
    """Side by side with this Python's dataclass: the same reprs, comparisons, hashes, errors, signatures,
    pickling, introspection (``dataclasses.fields``/``is_dataclass``) and ``replace``; fields given with
    records' ``field`` or with dataclasses' own."""
    own_field = records.field if fields_from == "records" else field
    made = _behaviour(record(slots=slots), record(frozen=True, slots=slots), own_field, records.replace)
    expected = _behaviour(dataclasses.dataclass(slots=slots), dataclasses.dataclass(frozen=True, slots=slots))
    assert made == expected


def test_slots_records_hold_no_weakref():
    """A slots record has only its fields' slots: no stale ``__weakref__`` of the class it was made from."""
    A, B, F, *_ = _classes(record(slots=True), record(frozen=True, slots=True), records.field)
    for cls in (A, B, F):
        assert "__weakref__" not in vars(cls) and "__dict__" not in vars(cls)
        with pytest.raises(TypeError):
            weakref.ref(cls.__new__(cls))


def test_the_model_is_made_without_importing_dataclasses_or_inspect():
    """What `wrp inspect` imports makes its classes without dataclasses (and inspect, ast, dis, tokenize
    with it): about a fifth of its start-up before records made them themselves."""
    code = ("import sys, wrpkit.cli.inspect_run, wrpkit.checks.summary, wrpkit.formats.container; "
            "print(sorted({'dataclasses', 'inspect', 'ast'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_model_and_annotation_classes_keep_their_dataclass_methods():
    for cls in (m.Module, m.Region, m.KernelLaunch, m.Program, m.Fixed, m.Product, ann.DataType, ann.Annotations):
        assert dataclasses.is_dataclass(cls)
        params = cls.__dataclass_params__
        assert params.init and params.repr and params.eq and not params.order
        assert {"__repr__", "__eq__"} <= set(vars(cls))
        assert (cls.__hash__ is None) != params.frozen
    length = m.Product(m.Fixed(4), m.Field("size"))
    assert length == 4 * m.Field("size") and hash(length) == hash(4 * m.Field("size"))
    assert repr(length) == "Product(a=Fixed(n=4), b=Field(name='size'))"
    assert pickle.loads(pickle.dumps(length)) == length
