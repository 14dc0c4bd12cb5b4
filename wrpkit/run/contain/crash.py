"""Crash location and messages: which op a contained replay died in, and what to say about it.

Warp runs the whole graph in one native call (``capture_launch``), so the op
that crashed cannot be seen from outside.  :func:`located_crash` runs the
graph once more, in one child, as a copy that writes the op slot
(:mod:`wrpkit.op_slots`) before every op; the slot left by the crash names the
op and its path inside IF/WHILE bodies, as ``wrp-replay`` names it (the same
C code) and as the stepper of ``wrp trace`` names it.  :func:`crash_error`
words the :class:`~wrpkit.errors.WrpCrashError`.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ...deadline import Deadline, left
from ...errors import CRASH_STAGES, WrpCrashError, WrpError, WrpTimeoutError
from ...op_slots import AFTER_LAST_OP, SECOND_RUN
from ...records import record
from .served import ChildCrashed, signal_name
from .worker import ChildSource, ReplayWorker, verify_deferred, whole_region


#: Seconds the second run that names the crashing op may take (bounded further by a --timeout).
IDENTIFY_BUDGET_S = 120.0


def located_crash(prep, crash: ChildCrashed, device, inputs: Mapping, replays: int, deadline: Optional[Deadline],
                   identify: bool, verify_checksums: bool, source=None) -> WrpCrashError:
    """The :class:`WrpCrashError` of a crashed child; a crash while replaying is located by one more
    run with op slots (on the same inputs), within what is left before ``deadline``."""
    found = Located()
    if identify and crash.stage == "replaying" and len(prep.model.ops) > 0:
        budget = min(IDENTIFY_BUDGET_S, left(deadline) or IDENTIFY_BUDGET_S)
        found = _slotted_run(prep, device, inputs, replays, budget, source)
    return crash_error(prep, crash.signum, crash.stage, found.index, found.why, verify_checksums=verify_checksums,
                       path=found.path, how=SECOND_RUN)


def identify_crash(prep, device, inputs: Optional[Mapping], replays: int, *,
                   budget: float = IDENTIFY_BUDGET_S) -> "Located":
    """Name the op of a crash seen elsewhere (``wrp-replay`` killed before it said) by one run with op slots."""
    if len(prep.model.ops) == 0:
        return Located(why="the graph has no ops")
    verify_deferred(prep)
    whole = {name: whole_region(prep, name, a) for name, a in dict(inputs or {}).items()}
    source = ChildSource(prep)
    try:
        return _slotted_run(prep, device, whole, replays, budget, source)
    finally:
        source.close()


@record(frozen=True)
class Located:
    """Where a second run with op slots crashed.

    Attributes:
        index: The top-level op, or None.
        path: Its path inside IF/WHILE bodies (``"3"`` for a top-level op), or None.
        why: Why the op is not known, in words (when ``index`` is None).
    """

    index: Optional[int] = None
    path: Optional[str] = None
    why: str = "no second run was made to name it"


def _slotted_run(prep, device, inputs: Mapping, replays: int, budget: float, source=None) -> Located:
    """Replay once more in a child, the graph rewritten to write the op slot before each op; a crash
    leaves the op's record in a shared memory file."""
    from ...op_slots import EMPTY, SLOT, read_slot  # noqa: PLC0415
    from .shared import SharedArea  # noqa: PLC0415

    slot = SharedArea(SLOT.size, "wrpkit-op")
    slot.view()[:] = np.frombuffer(EMPTY, np.uint8)
    run = ReplayWorker(prep, device, op_slots=slot, source=source)
    try:
        run.run(inputs, max(1, replays), 0, Deadline(budget), read_back=[])
        return Located(why="the second run, with op slots, did not crash")
    except ChildCrashed:
        record = read_slot(slot.view())
        if record.all_ran:
            return Located(why=AFTER_LAST_OP)
        if not record.ran:
            return Located(why="the second run, with op slots, crashed before any op ran")
        if (record.index >= len(prep.model.ops) or record.path.split(".")[0] != str(record.index)
                or op_at_path(prep.model.ops, record.path) is None):
            return Located(why="the crash overwrote the op slot of the second run")
        return Located(record.index, record.path, "")
    except WrpTimeoutError:
        return Located(why="the second run, with op slots, ran out of time")
    except WrpError as e:
        return Located(why=f"the second run, with op slots, failed: {e.message}")
    finally:
        run.close()
        slot.close()


def module_verification(prep, verify_checksums: bool = True) -> dict:
    """``{binary_filename: how its bytes were verified, or ""}`` for every module of ``prep``.

    A module counts as verified when the SHA-256 that wrpkit recorded at save
    time was checked against it before it ran, or when it came from a
    ``.wrpk`` whose blob checksums were verified.
    """
    digests = prep.annotations.digest_map() if prep.annotations is not None else {}
    out = {}
    for mod in prep.model.modules:
        name = mod.binary_filename
        if name in digests:
            out[name] = "its SHA-256 recorded at save time was verified before it ran"
        elif prep.kind == "wrpk" and verify_checksums and not prep.modules_given:
            out[name] = "its SHA-256 recorded in the bundle was verified before it ran"
        else:
            out[name] = ""
    return out


NO_DIGEST_HINT = ("corrupt or mismatched kernel code cannot be caught before it runs; save the capture with "
                  "wrpkit (wrpkit.save or wrpkit.capture) or bundle it (wrp convert FILE out.wrpk) to record "
                  "module digests")


def op_at_path(ops, path: str):
    """The op at ``path`` as ``wrp inspect --ops`` writes it (``"1"``, ``"1.2"``, ``"1.e0"``), or None."""
    from ... import model as m  # noqa: PLC0415

    op = None
    try:
        for k, part in enumerate(str(path).split(".")):
            if k:
                if isinstance(op, m.If):
                    ops = op.else_ops if part.startswith("e") else op.then_ops
                elif isinstance(op, m.While):
                    ops = op.body
                else:
                    return None
            op = ops[int(part.lstrip("e"))]
    except (ValueError, IndexError):
        return None
    return op


def crash_error(prep, signum: int, stage: str, op_index: Optional[int], unknown: str = "", *,
                verify_checksums: bool = True, path: Optional[str] = None,
                iteration: Optional[int] = None, how: str = "the op the trace was running") -> WrpCrashError:
    """The :class:`WrpCrashError` for a replay that died of ``signum``.

    Args:
        prep: The :class:`~wrpkit.run.load.prepare.Prepared` capture.
        signum: The fatal signal.
        stage: A key of :data:`~wrpkit.errors.CRASH_STAGES`: ``"replaying"`` when ops were running
            (the only stage with an op to name); an unknown one is said as ``"loading"``.
        op_index: The top-level op that crashed, or None.
        unknown: Why the op is not known, in words (said when ``op_index`` is None).
        verify_checksums: Whether a ``.wrpk``'s blob checksums were verified.
        path: The op's path inside IF/WHILE bodies, from its op slot; it names the nested op
            rather than the top-level one.
        iteration: The innermost WHILE iteration of that op, if any.
        how: How the op was seen running (said after its path).
    """
    from ... import model as m  # noqa: PLC0415

    sig = signal_name(signum)
    verified = module_verification(prep, verify_checksums)
    modules = {mod.module_hash: mod.binary_filename for mod in prep.model.modules}
    kind = kernel = module = None
    digest_ok = None
    if stage != "replaying":  # nothing ran yet, or everything had: no op to name
        where = CRASH_STAGES.get(stage, CRASH_STAGES["loading"])
    elif op_index is None and unknown == AFTER_LAST_OP:
        where = AFTER_LAST_OP
    elif op_index is None:
        where = f"in an op that could not be identified ({unknown or 'nothing recorded it'})"
    else:
        op = (op_at_path(prep.model.ops, path) if path is not None else None) or prep.model.ops[op_index]
        kind = op.op_type.name
        where = f"in op {op_index} ({kind}"
        if isinstance(op, m.KernelLaunch):
            kernel, module = op.kernel_key, modules.get(op.module_hash)
            where += f" of kernel {kernel!r}, module {module!r}"
        where += ")"
        if path is not None:
            if path != str(op_index) or iteration is not None:
                where += f" at path {path}" + (f", WHILE iteration {iteration}" if iteration is not None else "")
            where += f" ({how})"
    msg = f"the replay crashed with {sig} {where}; nothing was written"
    if module is not None:
        how = verified.get(module, "")
        digest_ok = bool(how)
        msg += f". Module {module!r}: " + (how if how else "no digest was recorded, so " + NO_DIGEST_HINT)
        hint = ("The kernel code is as saved, so the crash comes from the data it was given: run `wrp check` "
                "for stale pointers and launches past their arrays." if how else
                "Run `wrp check` for stale pointers and launches past their arrays; recapture if the module "
                "files may have been altered.")
    else:
        unverified = sorted(n for n, how in verified.items() if not how)
        if unverified:
            msg += (f". Modules without a recorded digest ({', '.join(repr(n) for n in unverified[:3])}"
                    f"{', ...' if len(unverified) > 3 else ''}): " + NO_DIGEST_HINT)
        hint = "Run `wrp check` for stale pointers and launches past their arrays."
    return WrpCrashError(msg, hint=hint, signal_name=sig, op_index=op_index, op_kind=kind, kernel=kernel,
                         module=module, digest_verified=digest_ok, path=path, iteration=iteration)
