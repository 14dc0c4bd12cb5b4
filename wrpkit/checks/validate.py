"""Validation of a decoded capture: Warp's loader rules plus wrpkit's own.

The codecs already enforce the byte layout (every length, offset, record size
and reserved byte).  This module checks what a layout cannot: that every
reference points at something that exists and that every byte range an op,
relocation, binding, mesh or pointer location touches lies inside its region.
Warp's loader leaves most of these to replay time, where a bad offset becomes
a wrong result or a crash; wrpkit refuses the file up front.

:func:`validate_program` returns every problem it finds, not just the first,
so that ``wrp validate`` can list them all.

The rules live in modules by what they check: :mod:`~wrpkit.checks.table_checks`
(tables and annotations), :mod:`~wrpkit.checks.launch_checks` (kernel launches),
:mod:`~wrpkit.checks.op_checks` (the op walk and every other op) and
:mod:`~wrpkit.checks.module_files` (the module files beside the graph); this
module composes them into one checker and holds the entry points.
"""

from __future__ import annotations

from .. import model as m
from . import legacy as _legacy
from .launch_checks import LaunchChecks
from .module_files import validate_modules
from .op_checks import OpChecks
from .table_checks import TableChecks


class _Checker(TableChecks, LaunchChecks, OpChecks):
    """Every rule of schema/VALIDATION-RULES.md over one decoded program; ``problems`` collects them."""


def validate_program(prog: m.Program, annotations=None) -> list:
    """Check a decoded program against Warp's loader rules and wrpkit's own.

    Args:
        prog: A program from any codec.
        annotations: The decoded form of ``prog.annotations``, for a writer
            that has just encoded them from it (``wrp upgrade``): it is
            checked in place of decoding the bytes again.  Leave it None
            for anything read from a file.

    Returns:
        A list of :class:`~wrpkit.checks.problem.Problem`; empty when the program is valid.
    """
    c = _Checker(prog, annotations)
    c.metadata()
    for where, msg, severity in _legacy.metadata_problems(prog):
        c.err(where, msg, severity=severity)
    c.ops(prog.ops, "ops")
    from ..formats.launch_arrays import exceeded_launches, exceeded_message  # noqa: PLC0415

    for w, op, largest in exceeded_launches(prog.ops):
        c.err(w, exceeded_message(op, largest), op.at, severity="warning")
    if not any(p.severity == "error" for p in c.problems):
        from .memory import unreached_regions  # noqa: PLC0415

        regions = {r.region_id: i for i, r in enumerate(prog.regions)}
        for u in unreached_regions(prog):  # loading allocates what no op uses: an edited file?
            i = regions[u.region_id]
            c.err(f"regions[{i}].size", u.message(), getattr(prog.regions[i], "at", None), severity="warning")
    return c.problems


def validate_capture(capture) -> list:
    """All checks of :func:`validate_program` and :func:`~wrpkit.checks.module_files.validate_modules`."""
    return validate_program(capture.program) + validate_modules(capture)
