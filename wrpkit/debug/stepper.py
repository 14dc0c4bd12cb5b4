"""Replay a captured program one op at a time, by rewriting it.

Warp replays a whole graph per ``capture_launch``, and every loaded graph owns
its memory, so ops cannot be run one by one through separately loaded
graphs that share state.  :func:`build_stepper` therefore rewrites the
program once: every leaf op (every op that is not an IF or a WHILE, at any
nesting depth) becomes a leaf of a balanced binary tree of IF ops whose
conditions live in one extra control region.  Setting the conditions on one
root-to-leaf path (about log2(ops) int32 values) and launching the graph runs
exactly that one op, against the one copy of the program's memory.  The file
is loaded once, by either engine behind the one interface of
:mod:`wrpkit.run.replay.loaded` (Warp's Python API, or the C++ replayer's C
API in this process), and IF/WHILE ops of the original are driven here: their
condition is read from memory after each body iteration, exactly as Warp's
replayer does (``warp/native/apic.cpp``).

The rewritten program also binds every region under a synthetic name
(``__wrpkit_r<id>``) so that each one can be read and written.

Nothing here prints.
"""

from __future__ import annotations

import hashlib
from typing import Optional

import numpy as np

from .. import records
from ..records import field, record
from .. import model as m
from ..environment import WARP_WHILE_GUARD, while_guard_error
from ..errors import WrpError
from ..formats import annotations as ann

#: Name prefix of the bindings added to reach every region.
REGION_BINDING = "__wrpkit_r"
#: Name of the binding of the control region.
CONTROL_BINDING = "__wrpkit_ctl"


def region_arguments(fx) -> dict:
    """``{region_id: name}``: what an op calls each region it touches, from its effects
    (:func:`wrpkit.checks.effects.effects`, so every tool names them alike): a kernel
    argument (``x``, a struct field ``s.pos``, ``argN`` where the file names no
    arguments, as ``wrp inspect`` does) or the op table's role (``dst``, ``keys``).
    An array's data comes before its gradient or index buffer.
    """
    out: dict = {}
    for acc in sorted(fx.accesses, key=lambda a: a.part not in ("", "data")):
        if acc.region_id >= 0:
            out.setdefault(acc.region_id, acc.name)
    return out


# ---------------------------------------------------------------------------
# Region types, names and statistics
# ---------------------------------------------------------------------------


@record
class RegionInfo:
    """What is known about one region: its bindings and, where known, its typed view."""

    region_id: int
    size: int
    bindings: list = field(default_factory=list)
    #: The signature used to view the region typed (a binding's, or one made
    #: from a kernel argument's dtype), or None when the dtype is unknown.
    sig: Optional[ann.ArraySignature] = None
    dtype_name: Optional[str] = None
    dtype_source: str = "unknown"
    #: The name tools show: the binding's, else the kernel arguments' (``"f / forces"``), else ``"region N"``.
    name: str = ""
    _typed: Optional[tuple] = field(default=None, repr=False, compare=False)

    def typed(self, raw: np.ndarray) -> Optional[np.ndarray]:
        """A typed view of the region's bytes, or None when the dtype is unknown."""
        if self.sig is None:
            return None
        cached = self._typed
        if cached is not None and cached[0] is raw:
            return cached[1]  # the same live region (CPU): its typed view is made once
        try:
            view = ann.view_region(raw, self.sig)
        except (WrpError, ValueError, TypeError):
            return None
        self._typed = (raw, view)
        return view

    @property
    def element_dims(self) -> int:
        """Trailing numpy dims of one element (1 for vec3, 2 for mat33, 0 for scalars)."""
        return len(ann.element_layout(self.sig.dtype)[1]) if self.sig is not None else 0


def region_infos(program: m.Program, annotations=None, *, extra_signatures=None, dtypes=None,
                 inputs=None) -> dict:
    """``{region_id: RegionInfo}``: bindings, names and dtypes from
    :func:`wrpkit.checks.region_types.region_types` (the one region-typing function).

    Args:
        program: The program.
        annotations: Its decoded annotations, if the caller has them.
        extra_signatures, dtypes, inputs: Passed to ``region_types``.
    """
    from ..checks.region_types import region_types  # noqa: PLC0415

    types = region_types(program, annotations=annotations, extra_signatures=extra_signatures, dtypes=dtypes,
                         inputs=inputs)
    infos = {}
    for rid, rt in types.items():
        info = RegionInfo(rid, rt.size, list(rt.bindings), name=rt.name)
        sig = rt.signature()
        if sig is not None and _plain(rt.dtype):
            info.sig, info.dtype_name, info.dtype_source = sig, rt.dtype.name, rt.source
        infos[rid] = info
    return infos


def _plain(dt) -> bool:
    """A scalar, vector or matrix dtype (not a struct): one numpy scalar type."""
    return dt is not None and not dt.fields and dt.scalar != ann.ScalarKind.UNKNOWN


def digest(raw: np.ndarray) -> str:
    """Content digest of a region's bytes (SHA-256, first 32 hex digits)."""
    return hashlib.sha256(raw.data if raw.flags.c_contiguous else raw.tobytes()).hexdigest()[:32]


def region_stats(info: RegionInfo, raw: np.ndarray) -> dict:
    """``{"region", "binding", "name", "digest", "dtype", "nan", "inf", "min", "max"}`` of one region's bytes.

    ``dtype`` is None (and ``nan``/``inf``/``min``/``max`` too) where the
    region's dtype is unknown; ``nan``/``inf`` are 0 for integer dtypes.
    """
    d = {"region": info.region_id, "binding": info.bindings[0] if info.bindings else None,
         "name": info.name or None,
         "digest": digest(raw), "dtype": info.dtype_name, "nan": None, "inf": None, "min": None, "max": None}
    typed = info.typed(raw)
    if typed is None:
        return d
    if typed.size == 0:
        d["nan"] = d["inf"] = 0
        return d
    lo, hi = typed.min(), typed.max()
    if typed.dtype.kind == "f" and not (np.isfinite(lo) and np.isfinite(hi)):
        # min/max propagate NaN and reach +-Inf: only then count and take the finite range.
        bad = ~np.isfinite(typed)
        d["nan"], d["inf"] = int(np.isnan(typed).sum()), int(np.isinf(typed).sum())
        finite = typed[~bad]
        if finite.size:
            d["min"], d["max"] = float(finite.min()), float(finite.max())
        return d
    d["nan"] = d["inf"] = 0
    d["min"], d["max"] = (float(lo), float(hi)) if typed.dtype.kind == "f" else (int(lo), int(hi))
    return d


def first_nonfinite(info: RegionInfo, raw: np.ndarray) -> Optional[int]:
    """Flat index (in elements of the typed array) of the first NaN/Inf, or None."""
    typed = info.typed(raw)
    if typed is None or typed.dtype.kind != "f":
        return None
    bad = np.flatnonzero(~np.isfinite(typed))
    if not bad.size:
        return None
    per = int(np.prod(typed.shape[typed.ndim - info.element_dims:])) if info.element_dims else 1
    return int(bad[0]) // per


# ---------------------------------------------------------------------------
# The rewritten program
# ---------------------------------------------------------------------------


@record
class Stepper:
    """The rewritten program and what is needed to run its leaves one by one.

    Attributes:
        program: The rewritten :class:`wrpkit.model.Program`.
        leaves: Leaf ops of the original, in stream order (IF/WHILE bodies flattened).
        leaf_of: ``{id(op): leaf number}``.
        paths: Per leaf, ``(node indices, int32 values)`` to write into the control region.
        control_region: Region id of the control region.
        empty_leaf: With ``build_stepper(..., empty_leaf=True)``, the number of
            an extra leaf that runs nothing (an IF with empty bodies): a launch
            of it costs what stepping costs beyond any op (``wrp profile``
            measures that floor).  None otherwise.
        group_leaves: With ``build_stepper(..., groups=...)``, per group the
            number of an extra leaf that runs all the group's ops in one
            launch, in order, as one stream of Warp's replayer.
    """

    program: m.Program
    leaves: list
    leaf_of: dict
    paths: list
    control_region: int
    empty_leaf: Optional[int] = None
    group_leaves: list = field(default_factory=list)


def _leaves(ops, out: list) -> None:
    for op in ops:
        if isinstance(op, (m.If, m.While)):
            for body in m.nested_bodies(op):
                _leaves(body, out)
        else:
            out.append(op)


def build_stepper(program: m.Program, empty_leaf: bool = False, groups=()) -> Stepper:
    """Rewrite ``program`` so that each leaf op can be run alone (see the module docstring).

    Args:
        program: The program to rewrite.
        empty_leaf: Add one more leaf that runs nothing (:attr:`Stepper.empty_leaf`).
        groups: Lists of leaf ops that follow one another in one body: each
            gets one more leaf that runs them all (:attr:`Stepper.group_leaves`).
    """
    leaves: list = []
    _leaves(program.ops, leaves)
    ctl_id = max((r.region_id for r in program.regions), default=-1) + 1
    empty = None
    if empty_leaf:
        empty = len(leaves)
        leaves.append(m.If(cond_region_id=ctl_id, cond_offset=0, then_ops=[], else_ops=[]))
    # A group runs as the then body of an IF on a control value that is always 1 (its offset is fixed below,
    # once the tree's node count is known): one body is one stream of Warp's replayer.
    group_ifs = [m.If(cond_region_id=ctl_id, cond_offset=0, then_ops=list(g), else_ops=[]) for g in groups]
    group_leaves = list(range(len(leaves), len(leaves) + len(group_ifs)))
    leaves.extend(group_ifs)
    nodes = [0]
    paths: list = [None] * len(leaves)

    def build(lo: int, hi: int, path: list) -> list:
        if hi - lo == 1:
            paths[lo] = (np.array([n for n, _ in path], dtype=np.intp), np.array([v for _, v in path], np.int32))
            return [leaves[lo]]
        node = nodes[0]
        nodes[0] += 1
        mid = (lo + hi) // 2
        then_ops = build(lo, mid, path + [(node, 1)])
        else_ops = build(mid, hi, path + [(node, 0)])
        return [m.If(cond_region_id=ctl_id, cond_offset=4 * node, then_ops=then_ops, else_ops=else_ops)]

    ops = build(0, len(leaves), []) if leaves else []
    slots = nodes[0]
    if group_ifs:
        always = nodes[0]
        slots += 1
        for g in group_ifs:
            g.cond_offset = 4 * always
        for leaf in group_leaves:
            idx, vals = paths[leaf]
            paths[leaf] = (np.append(idx, always).astype(np.intp), np.append(vals, 1).astype(np.int32))
    ctl = m.Region(region_id=ctl_id, element_size=4, size=4 * max(1, slots), has_initial_data=False)
    bindings = region_bindings(program) + [m.Binding(CONTROL_BINDING, ctl_id)]
    rewritten = records.replace(program, bindings=bindings, regions=list(program.regions) + [ctl], ops=ops)
    return Stepper(rewritten, leaves, {id(op): i for i, op in enumerate(leaves)}, paths, ctl_id, empty,
                   group_leaves)


def region_bindings(program: m.Program) -> list:
    """The program's bindings plus one synthetic binding per region (``__wrpkit_r<id>``)."""
    return list(program.bindings) + [m.Binding(f"{REGION_BINDING}{r.region_id}", r.region_id)
                                     for r in program.regions]


def prefix_program(program: m.Program, stop: int) -> m.Program:
    """A copy of ``program`` holding top-level ops ``[0, stop)``, every region bound by name."""
    return records.replace(program, bindings=region_bindings(program), ops=program.ops[:stop])


# ---------------------------------------------------------------------------
# Engines: one loaded program, raw access to its regions
# ---------------------------------------------------------------------------


class Machine:
    """A loaded stepper: run one leaf, read and write regions, read conditions."""

    def __init__(self, stepper: Stepper, engine):
        self.stepper = stepper
        self.engine = engine
        self._ctl_view = engine.view(CONTROL_BINDING)
        if self._ctl_view is not None:
            self._ctl = self._ctl_view.view(np.int32)
        else:
            self._ctl = np.zeros(stepper.program.region(stepper.control_region).size // 4, np.int32)
        self._views = {}

    def region(self, region_id: int) -> np.ndarray:
        """The region's bytes: a live zero-copy view on CPU, a fresh copy on CUDA."""
        name = f"{REGION_BINDING}{region_id}"
        v = self._views.get(region_id)
        if v is None:
            v = self.engine.view(name)
            if v is None:
                return self.engine.read(name)
            self._views[region_id] = v
        return v

    def write_region(self, region_id: int, data: np.ndarray) -> None:
        self.engine.write(f"{REGION_BINDING}{region_id}", data)

    def cond(self, region_id: int, offset: int) -> int:
        raw = self.region(region_id)
        return int(raw[offset:offset + 4].view(np.int32)[0])

    def run_leaf(self, leaf: int) -> None:
        idx, vals = self.stepper.paths[leaf]
        ctl = self._ctl
        ctl[idx] = vals
        if self._ctl_view is None:
            self.engine.write(CONTROL_BINDING, ctl)
        self.engine.launch()

    def close(self) -> None:
        self._views = {}
        self.engine.close()


def walk_program(ops, machine: Machine, visit, *, top: Optional[int] = None, prefix: str = "",
                 iterations: tuple = (), before=None) -> bool:
    """Run ``ops`` leaf by leaf, driving IF and WHILE here; call ``visit`` after each leaf.

    ``visit(op, index, path, iterations)`` returns True to stop.  Returns True
    when stopped.  Paths are those of ``wrp inspect --ops``.  ``before``, if
    given, is called with the same arguments just before each leaf runs (a
    contained trace records there which op a crash happened in).
    """
    for i, op in enumerate(ops):
        index = i if top is None else top
        path = f"{prefix}{i}"
        if isinstance(op, m.If):
            if machine.cond(op.cond_region_id, op.cond_offset):
                stop = walk_program(op.then_ops, machine, visit, top=index, prefix=path + ".", iterations=iterations,
                                    before=before)
            else:
                stop = walk_program(op.else_ops, machine, visit, top=index, prefix=path + ".e",
                                    iterations=iterations, before=before)
            if stop:
                return True
        elif isinstance(op, m.While):
            it = 0
            while op.body and machine.cond(op.cond_region_id, op.cond_offset):
                if walk_program(op.body, machine, visit, top=index, prefix=path + ".", iterations=iterations + (it,),
                                before=before):
                    return True
                it += 1
                if it >= WARP_WHILE_GUARD:  # stepping stops where Warp's replay would
                    raise while_guard_error(f"the WHILE at op {path}")
        else:
            if before is not None:
                before(op, index, path, iterations)
            machine.run_leaf(machine.stepper.leaf_of[id(op)])
            if visit(op, index, path, iterations):
                return True
    return False
