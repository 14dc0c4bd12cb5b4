"""``@record``: the classes ``dataclasses.dataclass`` makes, made without importing ``dataclasses``.

Every ``wrp`` command imports the model (:mod:`wrpkit.ops`, :mod:`wrpkit.model`, the annotations):
about sixty classes.  ``dataclasses`` imports ``inspect`` (and with it ``ast``, ``dis`` and
``tokenize``) and, class by class, parses annotations, writes and compiles the source of each method,
computes a signature for the docstring and, for slots, builds the class twice: together about a fifth
of what ``wrp inspect`` spent before it printed anything (issue 42: inspect within 0.1 s).
:func:`record` makes the same class directly, with the same ``__init__`` (compiled once per class, as
the generated one is), ``__repr__``, ``__eq__``, ``__hash__``, frozen ``__setattr__``/``__delattr__``,
``__match_args__``, ``__slots__`` and pickling, behaving as this Python's ``dataclass`` does:

* ``__repr__``: ``QualName(a=1, b=[2])`` over the fields with ``repr=True``, ``...`` for an object
  met again while it is being printed (in the same thread);
* ``__eq__``: for an object of exactly the same class, the fields with ``compare=True`` compared as
  this Python's dataclass compares them (their tuples up to 3.12; one by one, after an identity test,
  from 3.13), else ``NotImplemented``;
* ``__hash__``: as ``dataclass(eq=True)`` decides it: the hash of the tuple of the hashed fields for a
  frozen class, unhashable (None) otherwise, and left alone where the class body sets it.

A method the class body defines itself stays, as with ``dataclass``.  What only introspection reads
(``__dataclass_fields__``, ``__dataclass_params__``, a generated docstring) is made on first use,
importing ``dataclasses`` then, so ``dataclasses.fields``, ``replace``, ``asdict`` and
``is_dataclass`` work on these classes as on any dataclass.  ``tests/project/test_records.py`` holds
the two to the same behaviour.  :func:`field` and :func:`fields` are this module's ``field`` and
``fields``.
"""

from __future__ import annotations

import sys
import weakref
from operator import attrgetter

from _thread import get_ident


class _Missing:
    __slots__ = ()

    def __repr__(self):
        return "MISSING"


#: No default given (``dataclasses.MISSING``'s role).
MISSING = _Missing()


class _Factory:
    __slots__ = ()

    def __repr__(self):
        return "<factory>"  # what a signature shows for a default made by a factory, as dataclass's


_HAS_DEFAULT_FACTORY = _Factory()


class RecordField:
    """One field of a record: what ``dataclasses.field`` says of it, and its ``name`` and ``type``."""

    __slots__ = ("name", "type", "default", "default_factory", "init", "repr", "hash", "compare", "metadata",
                 "classvar")

    def __init__(self, default=MISSING, default_factory=MISSING, init=True, repr=True, hash=None, compare=True,
                 metadata=None):
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = self.type = None
        self.default, self.default_factory = default, default_factory
        self.init, self.repr, self.hash, self.compare = init, repr, hash, compare
        self.metadata = metadata
        self.classvar = False

    def __repr__(self):
        return f"RecordField(name={self.name!r}, default={self.default!r}, init={self.init}, repr={self.repr})"


def field(*, default=MISSING, default_factory=MISSING, init: bool = True, repr: bool = True, hash=None,
          compare: bool = True, metadata=None) -> RecordField:
    """``dataclasses.field`` for a :func:`record` class (the same arguments, kw_only aside)."""
    return RecordField(default, default_factory, init, repr, hash, compare, metadata)


#: ``{class: (its fields with ClassVars, its fields, frozen)}`` of every record class, bases' fields
#: included: :func:`fields` answers per op on the tools' paths (``--ops``, diff), so it only looks up.
_RECORDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def fields(class_or_instance) -> tuple:
    """The fields of a :func:`record` class or instance, in order (ClassVars left out), as ``dataclasses.fields``."""
    cls = class_or_instance if isinstance(class_or_instance, type) else type(class_or_instance)
    for klass in cls.__mro__:
        known = _RECORDS.get(klass)
        if known is not None:
            return known[1]
    raise TypeError("must be called with a dataclass type or instance")


def replace(obj, /, **changes):
    """A copy of a :func:`record` instance with ``changes``, as ``dataclasses.replace``.

    Raises:
        ValueError: A change names a field that ``__init__`` does not take.
        TypeError: A change names no field (``__init__`` refuses it).
    """
    for f in fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified with replace()")
            continue
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


def is_record(obj) -> bool:
    """Whether ``obj`` is a :func:`record` class or an instance of one (``dataclasses.is_dataclass``)."""
    cls = obj if isinstance(obj, type) else type(obj)
    return any(klass in _RECORDS for klass in cls.__mro__)


def record(cls=None, /, *, frozen: bool = False, slots: bool = False):
    """``@dataclass(frozen=..., slots=...)`` with the default ``init``, ``repr`` and ``eq``."""

    def wrap(c):
        return _process(c, frozen, slots)

    return wrap if cls is None else wrap(cls)


def _from_dataclass_field(value) -> RecordField:
    """A ``dataclasses.Field`` given in a class body (``dataclasses`` is imported, then) as a RecordField."""
    missing = sys.modules["dataclasses"].MISSING
    return RecordField(MISSING if value.default is missing else value.default,
                       MISSING if value.default_factory is missing else value.default_factory,
                       value.init, value.repr, value.hash, value.compare, value.metadata)


def _is_dataclass_field(value) -> bool:
    dc = sys.modules.get("dataclasses")
    return dc is not None and isinstance(value, dc.Field)


def _is_classvar(annotation) -> bool:
    if isinstance(annotation, str):
        head = annotation.strip()
        return head.startswith(("ClassVar", "typing.ClassVar"))
    typing = sys.modules.get("typing")
    return typing is not None and (annotation is typing.ClassVar or getattr(annotation, "__origin__", None)
                                   is typing.ClassVar)


def _process(cls, frozen: bool, slots: bool):
    body = cls.__dict__
    all_fields: dict = {}
    any_frozen_base = has_record_bases = False
    for base in cls.__mro__[-1:0:-1]:
        known = _RECORDS.get(base)
        if known is not None:
            has_record_bases = True
            for f in known[0]:
                all_fields[f.name] = f
            any_frozen_base |= known[2]
    annotations = body.get("__annotations__", {})
    for name, annotation in annotations.items():
        value = body.get(name, MISSING)
        given = isinstance(value, RecordField) or _is_dataclass_field(value)
        if not given:
            f = RecordField(default=value)
        else:
            f = value if isinstance(value, RecordField) else _from_dataclass_field(value)
        f.name, f.type = name, annotation
        f.classvar = _is_classvar(annotation)
        if not f.classvar and f.default is not MISSING and f.default.__class__.__hash__ is None:
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not allowed: use default_factory")
        all_fields[name] = f
        if given:  # the class attribute becomes the default, or goes, as dataclass does
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
    for name, value in body.items():
        if (isinstance(value, RecordField) or _is_dataclass_field(value)) and name not in annotations:
            raise TypeError(f"{name!r} is a field but has no type annotation")
    if has_record_bases:
        if any_frozen_base and not frozen:
            raise TypeError("cannot inherit non-frozen dataclass from a frozen one")
        if not any_frozen_base and frozen:
            raise TypeError("cannot inherit frozen dataclass from a non-frozen one")
    field_list = [f for f in all_fields.values() if not f.classvar]
    class_hash = body.get("__hash__", MISSING)
    # dataclass's rule: a __hash__ of None that Python set because the body defines __eq__ is not the body's.
    explicit_hash = not (class_hash is MISSING or (class_hash is None and "__eq__" in body))

    _set_new(cls, "__init__", _init_fn(cls, field_list, frozen, slots))
    _set_new(cls, "__repr__", _repr_fn(tuple(f.name for f in field_list if f.repr)))
    compared = [f.name for f in field_list if f.compare]
    _set_new(cls, "__eq__", _eq_each_fn(compared) if sys.version_info >= (3, 13) else _eq_fn(_getter(compared)))
    if frozen:
        for fn in _frozen_get_del_attr(cls, tuple(f.name for f in field_list)):
            if _set_new(cls, fn.__name__, fn):
                raise TypeError(f"Cannot overwrite attribute {fn.__name__} in class {cls.__name__}")
    if not explicit_hash:
        if frozen:
            hashed = [f.name for f in field_list if (f.compare if f.hash is None else f.hash)]
            cls.__hash__ = _set_qualname(cls, _hash_fn(_getter(hashed)), "__hash__")
        else:
            cls.__hash__ = None
    if not getattr(cls, "__doc__"):
        cls.__doc__ = _LazyDoc()
    _set_new(cls, "__match_args__", tuple(f.name for f in field_list if f.init))
    if slots:
        cls = _add_slots(cls, frozen, field_list)
    _RECORDS[cls] = (tuple(all_fields.values()), tuple(field_list), frozen)
    # Read by introspection only (dataclasses.fields, replace, asdict, is_dataclass): made on first use.
    cls.__dataclass_fields__ = _LazyDataclassFields(cls)
    cls.__dataclass_params__ = _LazyDataclassParams(cls, frozen)
    return cls


def _set_qualname(cls, fn, name: str):
    fn.__name__ = name
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    return fn


def _set_new(cls, name: str, fn) -> bool:
    """Set ``name`` unless the class body defines it (True then), as dataclass's ``_set_new_attribute``."""
    if name in cls.__dict__:
        return True
    if callable(fn) and hasattr(fn, "__code__"):
        _set_qualname(cls, fn, name)
    setattr(cls, name, fn)
    return False


def _init_fn(cls, field_list: list, frozen: bool, slots: bool):
    """The class's ``__init__``, from the same source that dataclass writes for it."""
    seen_default = False
    for f in field_list:
        if f.init:
            if not (f.default is MISSING and f.default_factory is MISSING):
                seen_default = True
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
    self_name = "__dataclass_self__" if any(f.name == "self" for f in field_list) else "self"
    names = {"_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY, "__dataclass_builtins_object__": object}
    params, lines = [self_name], []
    for f in field_list:
        dflt = f"_dflt_{f.name}"
        if f.default_factory is not MISSING:
            names[dflt] = f.default_factory
            value = f"{dflt}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}" if f.init else f"{dflt}()"
        elif f.init:
            if f.default is not MISSING:
                names[dflt] = f.default
            value = f.name
        elif slots and f.default is not MISSING:
            names[dflt] = f.default
            value = dflt
        else:
            value = None
        if value is not None:
            if frozen:
                lines.append(f"__dataclass_builtins_object__.__setattr__({self_name},{f.name!r},{value})")
            else:
                lines.append(f"{self_name}.{f.name}={value}")
        if f.init:
            if f.default_factory is not MISSING:
                params.append(f"{f.name}=_HAS_DEFAULT_FACTORY")
            elif f.default is not MISSING:
                params.append(f"{f.name}={dflt}")
            else:
                params.append(f.name)
    if hasattr(cls, "__post_init__"):
        lines.append(f"{self_name}.__post_init__()")
    args = ", ".join(names)
    body = "\n".join(f"  {line}" for line in lines) or "  pass"
    source = f"def __create_fn__({args}):\n def __init__({', '.join(params)}):\n{body}\n return __init__"
    scope: dict = {}
    module = sys.modules.get(cls.__module__)
    exec(source, module.__dict__ if module is not None else {}, scope)  # noqa: S102  (source made here)
    fn = scope["__create_fn__"](**names)
    fn.__annotations__ = {**{f.name: f.type for f in field_list if f.init}, "return": None}
    return fn


def _frozen_get_del_attr(cls, names: tuple) -> tuple:
    """A frozen class's ``__setattr__`` and ``__delattr__``, as dataclass writes them (``cls`` is the class
    before slots are added, as in this Python's dataclass, whatever that makes of other attribute names)."""

    def __setattr__(self, name, value):
        if type(self) is cls or name in names:
            raise _frozen_error(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self, name):
        if type(self) is cls or name in names:
            raise _frozen_error(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


def _frozen_error(message: str):
    import dataclasses  # noqa: PLC0415  (a bug's path: the error class callers catch is dataclasses')

    return dataclasses.FrozenInstanceError(message)


def _add_slots(cls, frozen: bool, field_list: list):
    """The class made again with ``__slots__`` for its fields, as dataclass's ``_add_slots``."""
    if "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__} already specifies __slots__")
    cls_dict = dict(cls.__dict__)
    field_names = tuple(f.name for f in field_list)
    inherited = set()
    for base in cls.__mro__[1:-1]:
        own = base.__dict__.get("__slots__", ())
        inherited.update((own,) if isinstance(own, str) else own)
    cls_dict["__slots__"] = tuple(n for n in field_names if n not in inherited)
    for name in field_names:
        cls_dict.pop(name, None)
    cls_dict.pop("__dict__", None)
    cls_dict.pop("__weakref__", None)
    qualname = getattr(cls, "__qualname__", None)
    cls = type(cls)(cls.__name__, cls.__bases__, cls_dict)
    if qualname is not None:
        cls.__qualname__ = qualname
    if frozen:
        # Pickling (and copy) of a frozen class with slots, as dataclass's.
        if "__getstate__" not in cls_dict:
            cls.__getstate__ = _getstate
        if "__setstate__" not in cls_dict:
            cls.__setstate__ = _setstate
    return cls


def _getstate(self):
    return [getattr(self, f.name) for f in fields(self)]


def _setstate(self, state):
    for f, value in zip(fields(self), state):
        object.__setattr__(self, f.name, value)  # the class is frozen


_getstate.__name__ = _getstate.__qualname__ = "_dataclass_getstate"
_setstate.__name__ = _setstate.__qualname__ = "_dataclass_setstate"


class _LazyDataclassFields:
    """``__dataclass_fields__``: ``dataclasses.Field`` objects, made (and kept in the class) on first use."""

    def __init__(self, owner):
        self.owner = owner

    def __get__(self, obj, cls=None):
        import dataclasses  # noqa: PLC0415  (introspection: imported only here)

        out = {}
        for f in _RECORDS[self.owner][0]:
            if f.default_factory is not MISSING:
                d = dataclasses.field(default_factory=f.default_factory, init=f.init, repr=f.repr, hash=f.hash,
                                      compare=f.compare, metadata=f.metadata)
            else:
                d = dataclasses.field(default=dataclasses.MISSING if f.default is MISSING else f.default,
                                      init=f.init, repr=f.repr, hash=f.hash, compare=f.compare,
                                      metadata=f.metadata)
            d.name, d.type = f.name, f.type
            d._field_type = dataclasses._FIELD_CLASSVAR if f.classvar else dataclasses._FIELD  # noqa: SLF001
            d.kw_only = False
            out[f.name] = d
        type.__setattr__(self.owner, "__dataclass_fields__", out)
        return out


class _LazyDataclassParams:
    """``__dataclass_params__``: the ``dataclasses`` object that says how the class was made, on first use."""

    def __init__(self, owner, frozen: bool):
        self.owner, self.frozen = owner, frozen

    def __get__(self, obj, cls=None):
        import dataclasses  # noqa: PLC0415  (introspection: imported only here)

        flags = dict(init=True, repr=True, eq=True, order=False, unsafe_hash=False, frozen=self.frozen)
        try:
            params = dataclasses._DataclassParams(**flags, match_args=True, kw_only=False,  # noqa: SLF001
                                                  slots="__slots__" in self.owner.__dict__, weakref_slot=False)
        except TypeError:  # Python 3.11: the six flags
            params = dataclasses._DataclassParams(*flags.values())  # noqa: SLF001
        type.__setattr__(self.owner, "__dataclass_params__", params)
        return params


class _LazyDoc:
    """The docstring dataclass gives a class without one (``Name(a: int, b: str = 'x')``), made when read."""

    def __get__(self, obj, cls=None):
        import inspect  # noqa: PLC0415  (read by help() and documentation tools only)

        owner = cls if cls is not None else type(obj)
        try:
            text = str(inspect.signature(owner)).replace(" -> None", "")
        except (TypeError, ValueError):
            text = ""
        return owner.__name__ + text


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


__all__ = ["MISSING", "RecordField", "field", "fields", "is_record", "record", "replace"]
