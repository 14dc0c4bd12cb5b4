"""What stepping a launch costs beyond the op: the empty step, and on a CPU device the zero-size
launch that calibrates the launch and group floors (see :func:`zero_launch`, :func:`floors`)."""

from __future__ import annotations

import statistics
from typing import Optional

from .. import records
from .. import model as m
from .profile_groups import GROUP_OPS
from .profile_result import round_ns

#: Empty steps timed per round (their median over all rounds is the floor).
EMPTY_STEPS = 16
#: Zero-size launches in the graph that calibrates the launch floor (CPU), replayed once per round.
CALIBRATION_LAUNCHES = 2000


def zero_launch(program: m.Program) -> Optional[m.KernelLaunch]:
    """A copy of the program's first kernel launch that runs no thread (shape 0); None without launches.

    Why: stepping a launch costs more than stepping nothing, beyond the
    launch's own cost in a graph (Warp's CPU replayer, ``apic.cpp``
    ``apic_cpu_replay_stream``, allocates its argument scratch once per
    stream it replays, so a stepped launch pays that every time, and an
    empty step not at all).  A launch of no thread costs what a launch
    costs without its kernel's work, stepped and inside a graph alike, so
    the difference of the two is that cost of stepping.
    """
    for _, op in m.walk_ops(program.ops):
        if isinstance(op, m.KernelLaunch):
            return records.replace(op, shape=tuple(0 for _ in op.shape), size=0, dim=0)
    return None


def calibration_program(program: m.Program, zero: m.KernelLaunch) -> m.Program:
    """:data:`CALIBRATION_LAUNCHES` copies of ``zero`` over the program's regions, none with initial data.

    A launch of no thread touches no memory, so the regions are never paged in.
    """
    regions = [records.replace(r, has_initial_data=False, data=None) for r in program.regions]
    return records.replace(program, ops=[zero] * CALIBRATION_LAUNCHES, regions=regions, bindings=[],
                               annotations=b"")


def floors(empty: list, zero_stepped: list, zero_group_stepped: list, zero_in_graph: list) -> tuple:
    """``(floor_ms, launch_floor_ms, group_floor_ms)`` from one profile's timed samples (ms each):
    empty steps; a zero-size launch stepped alone; a group of :data:`GROUP_OPS` of them stepped; and
    per zero-size launch inside the calibration graph (see :class:`~wrpkit.debug.profile_result.ProfileResult`)."""
    floor_ms = round_ns(statistics.median(empty)) if empty else 0.0
    launch_floor_ms = floor_ms
    if zero_stepped and zero_in_graph:
        launch_floor_ms = round_ns(max(floor_ms, statistics.median(zero_stepped) - statistics.median(zero_in_graph)))
    group_floor_ms = launch_floor_ms
    if zero_group_stepped and zero_in_graph:
        group_floor_ms = round_ns(max(floor_ms, statistics.median(zero_group_stepped)
                                      - GROUP_OPS * statistics.median(zero_in_graph)))
    return floor_ms, launch_floor_ms, group_floor_ms


__all__ = ["EMPTY_STEPS", "CALIBRATION_LAUNCHES", "zero_launch", "calibration_program", "floors"]
