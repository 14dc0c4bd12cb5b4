"""Crash location and messages: which op a contained replay died in, and what to say about it.

Warp runs the whole graph in one native call (``capture_launch``), so the op
that crashed cannot be seen from outside.  :func:`located_crash` finds it by
experiment: it replays prefixes of the top-level op list in further children
(a bisection, ``log2(ops)`` children) and names the first op whose prefix
crashes; :func:`crash_error` words the :class:`~wrpkit.errors.WrpCrashError`.
"""

from __future__ import annotations

import time
from typing import Mapping, Optional


from ..errors import WrpCrashError, WrpError
from .worker import ChildCrashed, ChildSource, ReplayWorker, signal_name, verify_deferred, whole_region


#: Seconds the search for the crashing op may take (bounded further by a --timeout).
IDENTIFY_BUDGET_S = 120.0



def located_crash(prep, crash: ChildCrashed, device, inputs: Mapping, replays: int, timeout: Optional[float],
                   t0: float, identify: bool, verify_checksums: bool, source=None) -> WrpCrashError:
    """The :class:`WrpCrashError` of a crashed child; a crash while replaying is located by bisecting on
    prefixes (a child per prefix, on the same inputs), within what is left of ``timeout``."""
    left = None if timeout is None else timeout - (time.monotonic() - t0)
    op_index, searched = None, False
    n = len(prep.model.ops)
    if identify and crash.stage == "replaying" and n > 0:
        budget = IDENTIFY_BUDGET_S if left is None else min(IDENTIFY_BUDGET_S, left)
        op_index, searched = _identify_op(prep, device, inputs, replays, n, budget, source)
    return crash_error(prep, crash.signum, crash.stage, op_index, searched, verify_checksums=verify_checksums)


def identify_crash(prep, device, inputs: Optional[Mapping], replays: int, *, verify_checksums: bool = True,
                   budget: float = IDENTIFY_BUDGET_S) -> tuple:
    """Find the op of a crash seen elsewhere (e.g. in ``wrp-replay``) by replaying prefixes in children.

    Returns:
        ``(op index or None, whether the search finished)``.
    """
    n = len(prep.model.ops)
    if n == 0:
        return None, False
    verify_deferred(prep)
    whole = {name: whole_region(prep, name, a) for name, a in dict(inputs or {}).items()}
    source = ChildSource(prep)
    try:
        return _identify_op(prep, device, whole, replays, n, budget, source)
    finally:
        source.close()


def _identify_op(prep, device, inputs: Mapping, replays: int, n: int, budget: float, source=None) -> tuple:
    """Bisect on op prefixes: ``(index of the first op whose prefix crashes, whether the search finished)``.

    The full graph is known to crash; the empty prefix is known not to.
    """
    deadline = time.monotonic() + budget
    lo, hi = 0, n  # prefix lo runs, prefix hi crashes
    while hi - lo > 1:
        left = deadline - time.monotonic()
        if left <= 1:
            return None, False
        mid = (lo + hi) // 2
        probe = ReplayWorker(prep, device, prefix=mid, source=source)
        try:
            probe.run(inputs, max(1, replays), 0, left, read_back=[])
            lo = mid
        except ChildCrashed:
            hi = mid
        except WrpError:
            return None, False  # the prefix did not run for another reason: no proof either way
        finally:
            probe.close()
    return hi - 1, True



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
    from .. import model as m  # noqa: PLC0415

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


def crash_error(prep, signum: int, stage: str, op_index: Optional[int], searched: bool, *,
                verify_checksums: bool = True, path: Optional[str] = None,
                iteration: Optional[int] = None) -> WrpCrashError:
    """The :class:`WrpCrashError` for a replay that died of ``signum``.

    Args:
        prep: The :class:`~wrpkit.run.prepare.Prepared` capture.
        signum: The fatal signal.
        stage: ``"replaying"`` when ops were running, else the crash came while loading.
        op_index: The top-level op that crashed, or None.
        searched: Whether a search for the op finished (said when ``op_index`` is None).
        verify_checksums: Whether a ``.wrpk``'s blob checksums were verified.
        path: Where the op was seen running (``wrp trace``): its path inside
            IF/WHILE bodies; it names the nested op rather than the top-level one.
        iteration: The innermost WHILE iteration of that op, if any.
    """
    from .. import model as m  # noqa: PLC0415

    sig = signal_name(signum)
    verified = module_verification(prep, verify_checksums)
    modules = {mod.module_hash: mod.binary_filename for mod in prep.model.modules}
    kind = kernel = module = None
    digest_ok = None
    if stage != "replaying":
        where = "while Warp loaded the capture (before any op ran)"
    elif op_index is None:
        where = ("in an op that could not be identified (" +
                 ("no prefix of the graph reproduced the crash" if searched else
                  "the search for it ran out of time") + ")")
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
            where += " (the op the trace was running)"
        elif op_index > 0:
            where += f" (found by replaying prefixes of the graph: ops 0..{op_index - 1} replay without crashing)"
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
