"""Which arrays a Warp kernel reads and which it writes, found from its Python source.

Warp's code generator tracks this per argument (``Var.is_read`` /
``Var.is_write``) only when ``verify_autograd_array_access`` is on, and that
option changes the module hash and forces a rebuild.  wrpkit instead walks the
kernel's syntax tree (``kernel.adj.tree``, which Warp parsed when the kernel
was defined) once per kernel and caches the answer, so a capture pays
microseconds per distinct kernel and nothing per launch.

The analysis is conservative: a store (``a[i] = v``) is a write, a load is a
read, ``a[i] += v`` and ``wp.atomic_*`` are both, ``wp.tile_load`` reads and
``wp.tile_store`` writes, calls into ``@wp.func`` functions are analysed
through their own trees, and anything else an array is handed to (a builtin
wrpkit does not list, a function it cannot resolve) counts as read and write.
Only array arguments are analysed; other arguments are ``UNKNOWN``.  The same
walk records the source line of each read and write (:func:`argument_lines`).
"""

from __future__ import annotations

import ast
import weakref

from ...formats.annotations import ArgumentAccess

_R, _W = 1, 2

#: Builtins that only read the array handed to them as their first argument.
_READ_BUILTINS = frozenset({
    "tile_load", "tile_load_indexed", "load", "lower_bound", "address", "view", "array", "tile_view",
})
#: Builtins that only write their first argument.
_WRITE_BUILTINS = frozenset({"tile_store", "tile_store_indexed", "store"})
#: Builtins that read nothing of the array (metadata only).
_META_BUILTINS = frozenset({"len"})
#: Array attributes that are metadata, not element data.
_META_ATTRS = frozenset({"shape", "ndim", "strides", "size", "dtype"})

#: Nodes that hold no expression (so no array): skipped by the walker.
_LEAVES = (ast.Constant, ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Pass,
           ast.Break, ast.Continue)

_kernel_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_func_cache: dict = {}


def _flags_to_access(flags: int) -> ArgumentAccess:
    return {0: ArgumentAccess.UNUSED, _R: ArgumentAccess.READ, _W: ArgumentAccess.WRITE,
            _R | _W: ArgumentAccess.READ_WRITE}[flags]


def kernel_argument_access(kernel) -> tuple:
    """The :class:`ArgumentAccess` of each argument of a Warp kernel, in declaration order.

    Computed once per kernel object and cached.  Never raises: a kernel
    whose source cannot be analysed gets ``UNKNOWN`` for every argument.

    Args:
        kernel: A ``wp.Kernel`` (``@wp.kernel``).

    Returns:
        A tuple with one :class:`ArgumentAccess` per argument.
    """
    try:
        return _kernel_cache[kernel]
    except (KeyError, TypeError):
        pass
    try:
        out = _analyse_kernel(kernel)
    except Exception:  # noqa: BLE001 -- the analysis must never break a capture
        out = tuple(ArgumentAccess.UNKNOWN for _ in getattr(getattr(kernel, "adj", None), "args", ()) or ())
    try:
        _kernel_cache[kernel] = out
    except TypeError:
        pass
    return out


def kernel_signature(kernel, key: str, module_hash: str, launch=None):
    """The :class:`~wrpkit.formats.annotations.KernelSignature` of a Warp kernel object.

    Each argument's name, type text, dtype and ndim from the kernel's own
    code, its access from :func:`kernel_argument_access`, and its value size
    from ``launch`` (a :class:`~wrpkit.model.KernelLaunch` of it; 0 without one);
    the file and line of its ``def`` (:func:`wrpkit.run.capture.call_sites.kernel_source`).
    Used by ``wrpkit.capture`` (the kernels it recorded) and by ``--kernels``
    (the user's kernels matched to a stock capture).
    """
    import warp.types as wt  # noqa: PLC0415

    from ...formats import annotations as ann  # noqa: PLC0415
    from ..warp_bridge.dtypes import dtype_from_warp  # noqa: PLC0415

    access = kernel_argument_access(kernel)
    params = launch.params if launch is not None else []
    args = []
    for i, var in enumerate(kernel.adj.args):
        t = var.type
        dtype, ndim = None, 0
        try:
            if wt.is_array(t):
                dtype, ndim = dtype_from_warp(t.dtype), int(t.ndim)
            else:
                dtype = dtype_from_warp(t)
        except TypeError:
            pass
        try:
            tname = wt.type_repr(t)
        except Exception:  # noqa: BLE001
            tname = str(t)
        size = params[i].value_size if i < len(params) else 0
        args.append(ann.KernelArgument(var.label, tname, int(size), dtype, ndim,
                                       int(access[i]) if i < len(access) else 0))
    from .call_sites import kernel_source  # noqa: PLC0415

    source_file, source_line = kernel_source(kernel)  # the `def`'s file (relative to the program's root) and line
    return ann.KernelSignature(key, module_hash, tuple(args), source_file, source_line)


def argument_lines(kernel) -> dict:
    """Where a kernel's source touches each array it is given: ``{name: {"read": [line, ...], "write": [...]}}``.

    One entry per array argument, and per array field of a struct argument
    (``"s.pos"``), in declaration order, each with the sorted absolute line
    numbers (in ``kernel.adj.filename``, numbered as Warp numbers them in its
    messages) where the kernel indexes, loads, stores or applies an atomic to
    it, as :func:`kernel_argument_access` finds (an atomic or ``a[i] += v`` is
    both).  A ``@wp.func`` the array is handed to counts at its own lines when
    it is in the kernel's file, at the line of the call when not; a whole
    struct handed somewhere unanalysable counts for each of its array fields.
    Never raises: a kernel whose source cannot be analysed gets empty lists.

    Args:
        kernel: A ``wp.Kernel``.
    """
    from .kernel_types import kernel_argument_types  # noqa: PLC0415

    try:
        types = kernel_argument_types(kernel)
    except Exception:  # noqa: BLE001 -- a type Warp could not resolve: nothing to name
        return {}
    keys = []
    for t in types:
        if t.is_array:
            keys.append((t.name, t.name))
        else:
            keys.extend((slot.path, t.name) for slot in t.arrays)
    try:
        adj = kernel.adj
        _, lines = _analyse(adj, frozenset(v.label for v in adj.args), ())
    except Exception:  # noqa: BLE001 -- the analysis must never break a tool
        lines = {}
    out = {}
    for key, arg in keys:
        reads, writes = set(lines.get(key, ((), ()))[0]), set(lines.get(key, ((), ()))[1])
        if key != arg:  # a struct field: also where the whole struct was touched, and a nested field's parent
            parts = key.split(".")
            for n in range(1, len(parts)):
                whole = lines.get(".".join(parts[:n]))
                if whole:
                    reads |= whole[0]
                    writes |= whole[1]
        out[key] = {"read": sorted(reads), "write": sorted(writes)}
    return out


def _analyse_kernel(kernel) -> tuple:
    from .kernel_types import kernel_argument_types  # noqa: PLC0415

    adj = kernel.adj
    labels = [v.label for v in adj.args]
    flags = _analyse_function(adj, frozenset(labels), ())
    out = []
    for v, t in zip(adj.args, kernel_argument_types(kernel)):
        # An array, or a struct holding arrays: what the kernel does to its arrays (a struct's
        # other fields are values), by the types Warp resolved.
        if t.is_array or t.arrays:
            out.append(_flags_to_access(flags.get(v.label, 0)))
        else:
            out.append(ArgumentAccess.UNKNOWN)
    return tuple(out)


def _analyse_function(adj, params: frozenset, stack: tuple) -> dict:
    """``{param name: flags}`` of one function (kernel or ``@wp.func``) for the named parameters."""
    return _analyse(adj, params, stack)[0]


def _analyse(adj, params: frozenset, stack: tuple) -> tuple:
    """``({param: flags}, {param or "param.field": (read lines, write lines)})`` of one function.

    Lines are absolute in ``adj.filename``; what a ``@wp.func`` of another file does counts at
    the line that calls it.
    """
    key = (id(adj), params)
    hit = _func_cache.get(key)
    if hit is not None and hit[0] is adj:
        return hit[1], hit[2]
    if id(adj) in stack:  # recursion: assume the worst
        return {p: _R | _W for p in params}, {}
    tree = adj.tree
    fdef = tree.body[0] if isinstance(tree, ast.Module) else tree
    walker = _Walker(adj, params, stack + (id(adj),))
    for stmt in fdef.body:
        walker.visit(stmt)
    result = {p: walker.flags.get(p, 0) for p in params}
    lines = {k: (frozenset(r), frozenset(w)) for k, (r, w) in walker.lines.items()}
    _func_cache[key] = (adj, result, lines)
    return result, lines


class _Walker(ast.NodeVisitor):
    """Marks reads and writes of array parameters (and local names aliasing them) in one function body."""

    def __init__(self, adj, params: frozenset, stack: tuple):
        self.adj = adj
        self.stack = stack
        self.alias = {p: {p} for p in params}  # local name -> parameters it may refer to
        # dimensionality of array parameters (0 where unknown, e.g. a @wp.func's generic parameter)
        self.ndim = {v.label: int(getattr(v.type, "ndim", 0) or 0) for v in getattr(adj, "args", ()) or ()}
        #: struct parameters holding arrays: {name: {array field: ndim}}
        self.struct_arrays: dict = {}
        for v in getattr(adj, "args", ()) or ():
            vars_ = getattr(v.type, "vars", None)
            if isinstance(vars_, dict):
                fields = {n: int(getattr(var.type, "ndim", 0) or 0) for n, var in vars_.items()
                          if hasattr(var.type, "ndim") and hasattr(var.type, "dtype")}
                if fields:
                    self.struct_arrays[v.label] = fields
        self.flags: dict = {}
        #: ``{param or "param.field": (read lines, write lines)}``, absolute in ``adj.filename``
        self.lines: dict = {}
        self._first_line = int(getattr(adj, "fun_lineno", 0) or 0)
        self._line = None  # absolute line of the innermost node being visited

    # -- dispatch: ast.NodeVisitor's, with the method looked up once per node class and leaves that
    # cannot name an array (constants, operators, contexts) skipped
    _dispatch: dict = {}

    def visit(self, node):
        cls = node.__class__
        method = self._dispatch.get(cls)
        if method is None:
            if issubclass(cls, _LEAVES):
                method = _Walker._skip
            else:
                method = getattr(_Walker, "visit_" + cls.__name__, _Walker.generic_visit)
            self._dispatch[cls] = method
        lineno = getattr(node, "lineno", None)
        if lineno is None:
            return method(self, node)
        outer = self._line
        self._line = lineno - 1 + self._first_line  # as Warp numbers a kernel's lines (Adjoint.set_lineno)
        try:
            return method(self, node)
        finally:
            self._line = outer

    def _skip(self, node) -> None:
        return None

    def generic_visit(self, node):
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    # -- helpers ---------------------------------------------------------
    def _mark(self, roots, f: int, node=None) -> None:
        for r in roots:
            self.flags[r] = self.flags.get(r, 0) | f
        if f and roots and self._line is not None:
            field = self._field(node) if node is not None else None
            for r in roots:
                self._record(f"{r}.{field}" if field else r, f, self._line)

    def _record(self, key: str, f: int, line: int) -> None:
        entry = self.lines.get(key)
        if entry is None:
            entry = self.lines[key] = (set(), set())
        if f & _R:
            entry[0].add(line)
        if f & _W:
            entry[1].add(line)

    def _field(self, node) -> "str | None":
        """The array field of a struct parameter an expression is rooted at (``s.pos[i]`` -> ``pos``), or None."""
        below = None
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            if isinstance(node, ast.Attribute):
                below = node.attr
            node = node.value
        if isinstance(node, ast.Name) and below is not None and below in self.struct_arrays.get(node.id, ()):
            return below
        return None

    def _roots(self, node) -> set:
        """Parameters an expression's array may refer to (empty when it is not rooted at one).

        Through a struct parameter only its array fields count (``s.pos[i]``):
        ``s.n`` is a value passed by copy, so reading it touches no array.
        """
        below = None  # the attribute directly under the root name
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            if isinstance(node, ast.Attribute) and node.attr in _META_ATTRS:
                return set()  # `a.shape[0]`: metadata, not the array's elements
            if isinstance(node, ast.Attribute):
                below = node.attr
            node = node.value
        if isinstance(node, ast.Name):
            roots = self.alias.get(node.id, set())
            if below is not None and roots and node.id in self.struct_arrays \
                    and below not in self.struct_arrays[node.id]:
                return set()
            return roots
        return set()

    def _is_element(self, node) -> bool:
        """Whether a subscript picks one element (all indices given), not a view of an array."""
        if not isinstance(node, ast.Subscript):
            return False
        n_index = len(node.slice.elts) if isinstance(node.slice, ast.Tuple) else 1
        base = node.value
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) \
                and base.value.id in self.struct_arrays:
            ndim = self.struct_arrays[base.value.id].get(base.attr, 0)
        elif isinstance(base, ast.Name):
            roots = self.alias.get(base.id, set())
            ndim = max((self.ndim.get(r, 0) for r in roots), default=0)
        else:
            return True  # a subscript of a subscript (`a[i][j]`) or of an expression: a value
        return ndim == 0 or n_index >= ndim

    def _is_meta(self, node) -> bool:
        """Whether an expression reads only an array's metadata (``a.shape``, ``a.shape[0]``)."""
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            if isinstance(node, ast.Attribute) and node.attr in _META_ATTRS:
                inner = node.value
                while isinstance(inner, (ast.Subscript, ast.Attribute)):
                    inner = inner.value
                return isinstance(inner, ast.Name) and inner.id in self.alias
            node = node.value
        return False

    def _resolve(self, func_node):
        """The Python object a call's function expression names, or None."""
        if isinstance(func_node, ast.Name):
            return self._lookup(func_node.id)
        if isinstance(func_node, ast.Attribute):
            base = self._resolve(func_node.value)
            return getattr(base, func_node.attr, None) if base is not None else None
        return None

    def _lookup(self, name):
        try:
            return self.adj.resolve_external_reference(name)
        except Exception:  # noqa: BLE001
            return None

    @staticmethod
    def _call_name(func_node) -> str:
        if isinstance(func_node, ast.Attribute):
            return func_node.attr
        if isinstance(func_node, ast.Name):
            return func_node.id
        return ""

    # -- visitors --------------------------------------------------------
    def _alias_source(self, value) -> set:
        """Parameters a local name assigned ``value`` refers to: ``b = a``, or a view ``row = a[i]`` of a
        multi-dimensional array (an element ``v = a[i]`` is a value, not an alias)."""
        if isinstance(value, ast.Name):
            return set(self.alias.get(value.id, ()))
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
            roots = self.alias.get(value.value.id, set())
            n_index = len(value.slice.elts) if isinstance(value.slice, ast.Tuple) else 1
            if roots and any(self.ndim.get(r, 0) > n_index for r in roots):
                return set(roots)
        return set()

    def visit_Assign(self, node):
        src = self._alias_source(node.value)
        if isinstance(node.value, ast.Subscript) and src:
            self._visit_indices(node.value)  # taking a view reads nothing
        elif not isinstance(node.value, ast.Name):  # `b = a` only aliases
            self.visit(node.value)
        for t in node.targets:
            self._store(t, src)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            if not isinstance(node.value, ast.Name):
                self.visit(node.value)
            self._store(node.target, self._alias_source(node.value))

    def _store(self, target, src) -> None:
        if isinstance(target, ast.Name):
            if src:
                self.alias[target.id] = set(src)
            else:
                self.alias.pop(target.id, None)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            roots = self._roots(target)
            self._mark(roots, _W, target)
            self._visit_indices(target)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for e in target.elts:
                self._store(e, set())

    def visit_AugAssign(self, node):
        self.visit(node.value)
        t = node.target
        if isinstance(t, (ast.Subscript, ast.Attribute)):
            self._mark(self._roots(t), _R | _W, t)
            self._visit_indices(t)
        elif isinstance(t, ast.Name) and t.id in self.alias:
            self._mark(self.alias[t.id], _R | _W)

    def _visit_indices(self, node) -> None:
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            if isinstance(node, ast.Subscript):
                self.visit(node.slice)
            node = node.value
        if not isinstance(node, ast.Name):
            self.visit(node)

    def visit_Subscript(self, node):
        if self._is_meta(node):
            self._visit_indices(node)
            return
        roots = self._roots(node)
        if roots:
            self._mark(roots, _R, node)
            self._visit_indices(node)
        else:
            self.generic_visit(node)

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id in self.struct_arrays \
                and node.attr not in self.struct_arrays[node.value.id] and node.value.id in self.alias:
            return  # a struct's value field (`s.n`): copied in, no array touched
        if self._is_meta(node):
            self._visit_indices(node)
            return
        roots = self._roots(node)
        if roots:
            if node.attr not in _META_ATTRS:
                self._mark(roots, _R, node)
            self._visit_indices(node)
        else:
            self.generic_visit(node)

    def visit_Name(self, node):
        # an array named anywhere the walker has no rule for: it may be read and written
        if isinstance(node.ctx, ast.Load) and node.id in self.alias:
            self._mark(self.alias[node.id], _R | _W)

    def visit_Call(self, node):
        name = self._call_name(node.func)
        target = self._resolve(node.func)
        # array arguments of the call: (position or keyword, roots)
        # (an element `a[i]` or a struct's value field handed to a call is a value: a read, visited as such)
        arrays = []
        for i, a in enumerate(node.args):
            if self._passes_array(a):
                arrays.append((i, a))
            else:
                self.visit(a)
        for kw in node.keywords:
            if self._passes_array(kw.value):
                arrays.append((kw.arg, kw.value))
            else:
                self.visit(kw.value)
        if not isinstance(node.func, ast.Name):
            self.visit(node.func)
        if not arrays:
            return
        user = self._user_function(target)
        for where, a in arrays:
            roots = self._roots(a)
            if isinstance(a, ast.Attribute) and a.attr in _META_ATTRS:
                self._visit_indices(a)
                continue
            self._visit_indices(a)
            if user is not None:
                f, sub = self._user_access(user, where)
                if not sub:  # nothing located inside the function (recursion): the call's line
                    self._mark(roots, f, a)
                    continue
                # the flags, and the lines of the function's own body where it touches the array
                self.flags.update({r: self.flags.get(r, 0) | f for r in roots})
                field = self._field(a)
                for r in roots:
                    base = f"{r}.{field}" if field else r
                    for suffix, (reads, writes) in sub.items():
                        k = base if field else base + suffix
                        for line in reads:
                            self._record(k, _R, line)
                        for line in writes:
                            self._record(k, _W, line)
                continue
            elif name.startswith("atomic_") or name.startswith("tile_atomic") or name.startswith("tile_scatter"):
                f = _R | _W if where == 0 else _R
            elif name in _META_BUILTINS:
                f = 0
            elif name in _READ_BUILTINS and where in (0, "a", "arr", "array"):
                f = _R
            elif name in _WRITE_BUILTINS and where in (0, "a", "arr", "array"):
                f = _W
            else:
                f = _R | _W
            self._mark(roots, f, a)

    def _passes_array(self, node) -> bool:
        """Whether a call argument hands over an array (or a view, or a struct holding arrays) itself."""
        if not isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)) or not self._roots(node):
            return False
        if isinstance(node, ast.Subscript) and self._is_element(node):
            return False
        if isinstance(node, ast.Attribute) and node.attr not in _META_ATTRS and isinstance(node.value, ast.Subscript):
            return False  # `v[i].x`: a component of an element
        return True

    @staticmethod
    def _user_function(target):
        adj = getattr(target, "adj", None)
        if adj is not None and getattr(adj, "tree", None) is not None and getattr(target, "func", None) is not None:
            return target
        return None

    def _user_flags(self, func, where) -> int:
        """Flags a ``@wp.func`` puts on the parameter an array is passed to (all overloads together)."""
        return self._user_access(func, where)[0]

    def _user_access(self, func, where) -> tuple:
        """``(flags, {"" or ".field": (read lines, write lines)})`` a ``@wp.func`` puts on the parameter an
        array is passed to (all overloads together).  Lines are in this function's file: what a function
        of another file does counts at the line of the call."""
        adjs = [func.adj]
        adjs += [o.adj for o in (getattr(func, "user_overloads", None) or {}).values() if getattr(o, "adj", None)]
        out = 0
        sub: dict = {}
        here = getattr(self.adj, "filename", None)

        def add(suffix, f, lines) -> None:
            entry = sub.setdefault(suffix, (set(), set()))
            if f & _R:
                entry[0].update(lines)
            if f & _W:
                entry[1].update(lines)

        call_line = () if self._line is None else (self._line,)
        for adj in adjs:
            labels = [a.arg for a in _fdef(adj).args.args]
            if isinstance(where, int):
                pname = labels[where] if where < len(labels) else None
            else:
                pname = where if where in labels else None
            if pname is None:
                add("", _R | _W, call_line)
                return _R | _W, sub
            flags, lines = _analyse(adj, frozenset({pname}), self.stack)
            f = flags.get(pname, _R | _W)
            out |= f
            if getattr(adj, "filename", None) != here:
                add("", f, call_line)
                continue
            for k, (reads, writes) in lines.items():
                if k == pname or k.startswith(pname + "."):
                    suffix = k[len(pname):]
                    add(suffix, _R, reads)
                    add(suffix, _W, writes)
        return out, sub


def _fdef(adj):
    tree = adj.tree
    return tree.body[0] if isinstance(tree, ast.Module) else tree


__all__ = ["argument_lines", "kernel_argument_access", "kernel_signature"]
