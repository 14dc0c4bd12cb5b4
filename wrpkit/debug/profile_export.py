"""A profile as a Chrome trace-event file (``wrp profile -o``): Chromium DevTools' Performance panel
and Perfetto UI open it; ``wrp graph --profile`` reads it back (:mod:`wrpkit.debug.profile_format`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .. import model as m
from .profile_format import PROFILE_FORMAT


#: Trace times are whole multiples of 1/1024 us (just under a nanosecond): binary fractions, so that a
#: viewer's ``ts + dur`` in floating point is exact and an enclosing event never ends a rounding error
#: before its last child (Chromium's Performance panel drops such a child, and everything it holds).
TICKS_PER_US = 1024


def _us(ticks: int) -> float:
    """Integer ticks (:data:`TICKS_PER_US`) as the format's microseconds (exact in binary floating point)."""
    return ticks / TICKS_PER_US


def chrome_trace(result, program: Optional[m.Program] = None) -> dict:
    """The profile (a :class:`~wrpkit.debug.profile_result.ProfileResult`) as a Chrome trace-event file
    (``{"traceEvents": [...], ...}``).

    One complete event (``"ph": "X"``) per op run, laid end to end on one
    track in run order, each as long as its median time (``ms``); every
    IF and WHILE that ran is an enclosing event over its body's ops, and
    every WHILE iteration an enclosing event of its own, with the
    iteration in ``args``.  Each op event's ``args`` hold ``seq``,
    ``index``, ``path``, ``iteration``, ``kernel`` and ``raw_ms``, so that
    ``wrp graph --profile`` can read times back.  Timestamps are in
    microseconds, as the format says, each a whole multiple of 1/1024 us
    (:data:`TICKS_PER_US`), so that nesting holds in a viewer's floating point;
    an op whose median is zero (a coarse clock) is one such tick long.
    """
    meta = {"format": PROFILE_FORMAT, "file": result.file, "engine": result.engine, "device": result.device,
            "timer": result.timer, "repeat": result.repeat, "warmup": result.warmup, "total_ms": result.total_ms,
            "replay_ms": result.replay_ms, "floor_ms": result.floor_ms, "launch_floor_ms": result.launch_floor_ms,
            "group_floor_ms": result.group_floor_ms, "grouped_ops": result.grouped_ops, "coverage": result.coverage}
    pid, tid = 1, 1
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": tid,
               "args": {"name": f"wrp profile {Path(result.file).name}"}},
              {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
               "args": {"name": f"{result.engine} engine, {result.device} (medians of {result.repeat})"}}]
    program = program if program is not None else result.program
    # Times are whole ticks here, so that an enclosing event ends exactly where its last op does.
    open_groups: list = []  # [(key, event, start ns)], outermost first
    t = 0
    for o in result.ops:
        want = _groups_of(o, program)
        keep = 0
        while keep < min(len(open_groups), len(want)) and open_groups[keep][0] == want[keep][0]:
            keep += 1
        for _, ev, start in open_groups[keep:]:
            ev["dur"] = _us(t - start)
        del open_groups[keep:]
        for key, ev in want[keep:]:
            ev.update({"ph": "X", "ts": _us(t), "dur": 0.0, "pid": pid, "tid": tid})
            events.append(ev)
            open_groups.append((key, ev, t))
        # At least one tick: a viewer draws a zero-length event wider than it is (DevTools: 1 us) and may
        # then nest the event that starts where it ends inside it; args keep the measured ``ms`` as is.
        dur = max(1, round(o["ms"] * 1e3 * TICKS_PER_US))
        events.append({"name": o["kernel"] or o["op"], "cat": o["op"], "ph": "X", "ts": _us(t), "dur": _us(dur),
                       "pid": pid, "tid": tid,
                       "args": {k: o[k] for k in ("seq", "index", "path", "iteration", "iterations", "kernel", "op",
                                                  "ms", "raw_ms")}})
        t += dur
    for _, ev, start in open_groups:
        ev["dur"] = _us(t - start)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"wrpkit": meta}}


def _groups_of(o: dict, program: Optional[m.Program]) -> list:
    """``[(key, event)]`` of the IF/WHILE bodies (and WHILE iterations) enclosing an op run, outermost first."""
    if program is None:
        return []
    parts = o["path"].split(".")
    its = list(o["iterations"])
    out, prefix, ops, depth = [], "", program.ops, 0
    for k, part in enumerate(parts[:-1]):
        prefix = part if not prefix else f"{prefix}.{part}"
        try:
            node = ops[int(part.lstrip("e"))]
        except (ValueError, IndexError):
            return out
        if isinstance(node, m.While) and depth < len(its):
            outer = tuple(its[:depth])
            out.append(((prefix, outer), {"name": f"WHILE {prefix}", "cat": "WHILE", "args": {"path": prefix}}))
            out.append(((prefix, outer + (its[depth],)),
                        {"name": f"iteration {its[depth]}", "cat": "WHILE iteration",
                         "args": {"path": prefix, "iteration": its[depth]}}))
            depth += 1
            ops = node.body
        elif isinstance(node, m.If):
            branch = "else" if parts[k + 1].startswith("e") else "then"
            out.append(((prefix, tuple(its[:depth]), branch),
                        {"name": f"IF {prefix} ({branch})", "cat": "IF", "args": {"path": prefix, "branch": branch}}))
            ops = node.else_ops if branch == "else" else node.then_ops
        else:
            return out
    return out


__all__ = ["TICKS_PER_US", "chrome_trace"]
