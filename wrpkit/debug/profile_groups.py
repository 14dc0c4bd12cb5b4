"""Groups of consecutive leaf ops that ``wrp profile`` also steps together, one launch per group, and
how a group's time divides among its ops (see :func:`op_groups`)."""

from __future__ import annotations

import statistics
from typing import Optional

from .. import model as m
from ..environment import WARP_WHILE_GUARD, while_guard_error

#: Most consecutive leaf ops of one body stepped together in one launch (see :func:`op_groups`).
GROUP_OPS = 128


def op_groups(ops, out: Optional[list] = None) -> list:
    """Runs of up to :data:`GROUP_OPS` consecutive leaf ops of one body (at any depth), each of two or more.

    Why: stepped alone, every op is the first op of its stream, and Warp's
    CPU replayer (``apic.cpp``, ``apic_cpu_replay_stream``) sets up per
    stream (its argument scratch) what a whole replay sets up once; stepped
    together, a group pays that once, as the whole replay does, so the
    group's time less the launch floor is what its ops cost inside the
    graph, and the ops stepped alone say how it divides among them.
    """
    out = [] if out is None else out
    run: list = []
    for op in list(ops) + [None]:
        if op is not None and not isinstance(op, (m.If, m.While)):
            run.append(op)
            continue
        for k in range(0, len(run), GROUP_OPS):
            if len(run[k:k + GROUP_OPS]) > 1:
                out.append(run[k:k + GROUP_OPS])
        run = []
        if op is not None:
            for body in m.nested_bodies(op):
                op_groups(body, out)
    return out


def walk_groups(ops, machine, group_at: dict, group_leaves: list, on_group, *, top: Optional[int] = None,
                 prefix: str = "", iterations: tuple = (), before=None, nvtx: bool = False) -> None:
    """Run ``ops`` as :func:`~wrpkit.debug.stepper.walk_program` does, but each group in one launch.

    ``on_group(group number, paths of its ops, iterations)`` is called after
    each group's launch (``machine.last_ms`` holds its time); ops outside
    groups are stepped alone, untimed.  ``before`` is called with a group's
    first op.
    """
    i = 0
    while i < len(ops):
        op, index, path = ops[i], (i if top is None else top), f"{prefix}{i}"
        if isinstance(op, m.If):
            then = machine.cond(op.cond_region_id, op.cond_offset)
            walk_groups(op.then_ops if then else op.else_ops, machine, group_at, group_leaves, on_group, top=index,
                         prefix=path + ("." if then else ".e"), iterations=iterations, before=before, nvtx=nvtx)
        elif isinstance(op, m.While):
            it = 0
            while op.body and machine.cond(op.cond_region_id, op.cond_offset):
                walk_groups(op.body, machine, group_at, group_leaves, on_group, top=index, prefix=path + ".",
                             iterations=iterations + (it,), before=before, nvtx=nvtx)
                it += 1
                if it >= WARP_WHILE_GUARD:  # profiling stops where Warp's replay would
                    raise while_guard_error(f"the WHILE at op {path}")
        else:
            if before is not None:
                before(op, index, path, iterations)
            group = group_at.get(id(op))
            if group is not None:
                g, n = group
                if nvtx:
                    machine.label = f"group {path} ({n} ops)".encode()
                machine.run_leaf(group_leaves[g])
                on_group(g, [f"{prefix}{j}" for j in range(i, i + n)], iterations)
                i += n
                continue
            machine.run_leaf(machine.stepper.leaf_of[id(op)])
        i += 1


def split_groups(group_samples: dict, group_members: dict, raw_of: dict, kinds: dict, floor_ms: float,
                  group_floor_ms: float) -> dict:
    """``{(path, iterations): ms}`` of every op in a timed group: the group's median less its floor
    (``group_floor_ms`` for a group with a kernel launch, else ``floor_ms``), split by each op's own median
    above the empty step (equally where none is above it)."""
    out = {}
    for key, times in group_samples.items():
        members = [k for k in group_members[key] if k in raw_of]
        if not members:
            continue
        launches = any(isinstance(kinds.get(k), m.KernelLaunch) for k in members)
        total = max(0.0, statistics.median(times) - (group_floor_ms if launches else floor_ms))
        weights = [max(0.0, raw_of[k] - floor_ms) for k in members]
        whole = sum(weights)
        for k, w in zip(members, weights):
            out[k] = total * (w / whole if whole > 0 else 1 / len(members))
    return out


__all__ = ["GROUP_OPS", "op_groups", "walk_groups", "split_groups"]
