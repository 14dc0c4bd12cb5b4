"""``@record``: ``@dataclass`` whose ``__repr__``, ``__eq__`` and ``__hash__`` are shared, not compiled.

``dataclasses.dataclass`` writes the source of each method it adds and compiles it, class by class,
every time the module is imported: for the model's and the annotations' 49 classes, the three of them
were about a third of what ``wrp inspect`` spent importing those two modules (``docs/benchmarks.md``).  :func:`record` lets
``dataclass`` make the class (fields, ``__init__``, slots, frozen assignment: everything else) and adds
``__repr__``, ``__eq__`` and ``__hash__`` built from closures over the field names instead, which
behave as the generated ones do:

* ``__repr__``: ``QualName(a=1, b=[2])`` over the fields with ``repr=True``, ``...`` for an object
  met again while it is being printed (in the same thread);
* ``__eq__``: for an object of exactly the same class, the fields with ``compare=True`` compared as
  this Python's dataclass compares them (their tuples up to 3.12; one by one, after an identity test,
  from 3.13), else ``NotImplemented``;
* ``__hash__``: as ``dataclass(eq=True)`` decides it: the hash of the tuple of the hashed fields for a
  frozen class, unhashable (None) otherwise, and left alone where the class body sets it.

A method the class body defines itself stays, as with ``dataclass``.  ``dataclasses.fields``,
``replace``, ``asdict``, pickling and ``__dataclass_params__`` are those of the dataclass.
"""

from __future__ import annotations

import dataclasses
import sys
from operator import attrgetter

from _thread import get_ident


def record(cls=None, /, *, frozen: bool = False, slots: bool = False):
    """``@dataclass(frozen=..., slots=...)`` with the default ``init``, ``repr`` and ``eq``."""

    def wrap(c):
        return _process(c, frozen, slots)

    return wrap if cls is None else wrap(cls)


def _process(cls, frozen: bool, slots: bool):
    body = cls.__dict__
    own_repr = "__repr__" in body
    own_eq = "__eq__" in body
    class_hash = body.get("__hash__", dataclasses.MISSING)
    # dataclass's rule: a __hash__ of None that Python set because the body defines __eq__ is not the body's.
    explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and own_eq))
    cls = dataclasses.dataclass(cls, repr=False, eq=False, frozen=frozen, slots=slots)
    params = cls.__dataclass_params__
    params.repr = params.eq = True  # what the class is: a dataclass with repr and eq
    fields = dataclasses.fields(cls)
    if not own_repr:
        _set(cls, "__repr__", _repr_fn(tuple(f.name for f in fields if f.repr)))
    if not own_eq:
        compared = [f.name for f in fields if f.compare]
        _set(cls, "__eq__", _eq_each_fn(compared) if sys.version_info >= (3, 13) else _eq_fn(_getter(compared)))
    if not explicit_hash:
        if frozen:
            hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
            _set(cls, "__hash__", _hash_fn(_getter(hashed)))
        else:
            cls.__hash__ = None
    return cls


def _set(cls, name: str, fn) -> None:
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, fn)


def _getter(names: list):
    """``get(obj) -> tuple`` of those attributes (a tuple for one or none too, as the generated code forms)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _repr_fn(names: tuple):
    running = set()

    def __repr__(self):
        key = id(self), get_ident()
        if key in running:
            return "..."
        running.add(key)
        try:
            return (self.__class__.__qualname__ + "("
                    + ", ".join([f"{name}={getattr(self, name)!r}" for name in names]) + ")")
        finally:
            running.discard(key)

    return __repr__


def _eq_fn(get):
    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return get(self) == get(other)
        return NotImplemented

    return __eq__


def _eq_each_fn(names: list):
    # Python 3.13's dataclass: "self is other or self.a == other.a and self.b == other.b".
    def __eq__(self, other):
        if self is other:
            return True
        if other.__class__ is self.__class__:
            result = True
            for name in names:
                result = getattr(self, name) == getattr(other, name)
                if not result:
                    return result
            return result
        return NotImplemented

    return __eq__


def _hash_fn(get):
    def __hash__(self):
        return hash(get(self))

    return __hash__


__all__ = ["record"]
