"""``wrpkit.records.record`` makes classes that behave as ``dataclasses.dataclass`` makes them."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import field

import pytest

from wrpkit import model as m
from wrpkit.formats import annotations as ann
from wrpkit.records import record


def _classes(deco, frozen_deco):
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


def _behaviour(deco, frozen_deco) -> list:
    A, B, F, G, OwnEq, FrozenOwnEq = _classes(deco, frozen_deco)
    nan = float("nan")
    a = A(1, nan)
    rows = [repr(a), a == a, a == A(1, nan), A(1) == A(1, 0.0, [1]), A(1) == B(1), B(1) == B(1, w="w"),
            A(1) != A(2), A(1).__eq__(3), repr(B(2, 3.0, [1], "q")),
            F(1, (2,)) == F(1, (2,), 5), hash(F(1, (2,))) == hash(F(1, (2,), 7)), hash(F(1, (2,))) == hash((1, (2,))),
            repr(G()), G() == G(), hash(G()) == hash(()), OwnEq(1) == OwnEq(1), FrozenOwnEq(1) == FrozenOwnEq(2),
            A.__hash__, OwnEq.__hash__, FrozenOwnEq.__hash__ is None, copy.copy(F(1)) == F(1),
            copy.deepcopy(B(3)) == B(3), repr(A.__dataclass_params__), repr(F.__dataclass_params__),
            [f.name for f in dataclasses.fields(B)], str(inspect.signature(B)), A.__match_args__,
            getattr(A, "__slots__", None), sorted(k for k in vars(F) if k.startswith("__"))]
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


def test_record_behaves_as_dataclass():
    made = _behaviour(record(slots=True), record(frozen=True, slots=True))
    expected = _behaviour(dataclasses.dataclass(slots=True), dataclasses.dataclass(frozen=True, slots=True))
    assert made == expected


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
