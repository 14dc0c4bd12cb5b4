"""Does the saved capture do what the live step did? (``wrpkit.verify``)

Example::

    report = wrpkit.verify(step, inputs={"x": x}, outputs={"y": y}, device="cpu")
    if not report.ok:
        for mm in report.mismatches:
            print(mm.binding, mm.count, mm.max_abs_error, mm.first, mm.writers)
        print(report.hint)

:func:`verify` snapshots every bound array; runs ``step()`` eagerly and keeps
the results; puts the snapshot back; captures ``step()`` (or takes a given
:class:`~wrpkit.Recording`) and saves it; replays the saved file **in a fresh
Python process** (stale pointers and state that only the capturing process
holds fail only there) with the snapshot as inputs; and compares every
binding with the eager results.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Mapping, Optional

import numpy as np

from ..records import field, record
from .. import model as m
from ..checks.effects import effects, launch_label
from ..errors import WrpError
from . import stepper as st

_REPLAY_SCRIPT = r"""
import sys
import numpy as np
import wrpkit
path, inp, outp, device = sys.argv[1:5]
prog = wrpkit.load(path, device=device)
with np.load(inp) as z:
    inputs = {k: z[k] for k in z.files}
out = prog.run(inputs, outputs="*")
np.savez(outp, **out)
"""


@record
class Mismatch:
    """One binding whose replayed value differs from the live step's.

    Attributes:
        binding: The binding's name.
        count: Number of differing scalar values.
        max_abs_error: Largest absolute difference (None for non-numeric data).
        first: ``{"index": flat index, "live": value, "replay": value}`` of the first difference.
        writers: Ops of the saved capture that write the binding:
            ``[{"index", "path", "op", "kernel"}]`` (empty: nothing in the capture writes it).
    """

    binding: str
    count: int
    max_abs_error: Optional[float]
    first: dict
    writers: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"binding": self.binding, "count": self.count, "max_abs_error": self.max_abs_error,
                "first": self.first, "writers": self.writers}


@record
class VerifyReport:
    """The result of :func:`verify`.

    Attributes:
        ok: Every binding replayed to the live step's value (within tolerance).
        mismatches: One :class:`Mismatch` per differing binding.
        hint: The likely cause when not ok, else "".
        error: Set when the saved capture failed to load or replay in the fresh process.
        bindings: Names compared.
    """

    ok: bool
    mismatches: list = field(default_factory=list)
    hint: str = ""
    error: Optional[str] = None
    bindings: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"ok": self.ok, "mismatches": [x.to_json() for x in self.mismatches], "hint": self.hint,
                "error": self.error, "bindings": self.bindings}


def _writers(program: m.Program) -> dict:
    """``{region_id: [op rows]}`` of the ops that write each region."""
    from ..formats.annotations import read_annotations  # noqa: PLC0415

    notes = read_annotations(program)
    sigs = notes.kernel_map() if notes is not None else {}
    out: dict = {}

    def walk(ops, top, prefix):
        for i, op in enumerate(ops):
            index = i if top is None else top
            path = f"{prefix}{i}"
            if isinstance(op, m.If):
                walk(op.then_ops, index, path + ".")
                walk(op.else_ops, index, path + ".e")
            elif isinstance(op, m.While):
                walk(op.body, index, path + ".")
            else:
                row = {"index": index, "path": path, "op": op.op_type.name,
                       "kernel": launch_label(op, program) if isinstance(op, m.KernelLaunch) else None}
                for rid in effects(op, program, sigs).written_regions():
                    out.setdefault(rid, []).append(row)

    walk(program.ops, None, "")
    return out


def compare_arrays(name: str, live: np.ndarray, replay: np.ndarray, rtol: float, atol: float) -> Optional[Mismatch]:
    """A :class:`Mismatch` when two arrays differ beyond ``atol + rtol * |live|``.

    Equal non-finite values are equal: an Inf against the same Inf, NaN
    against NaN at the same element (:func:`wrpkit.checks.compare.compare_arrays`
    with ``equal_nan=True``); a NaN against a number is a difference.
    """
    from ..checks.compare import compare_arrays as compare  # noqa: PLC0415

    live, replay = np.asarray(live), np.asarray(replay)
    if live.shape != replay.shape or live.dtype != replay.dtype:
        return Mismatch(name, int(max(live.size, replay.size)), None,
                        {"index": None, "live": f"{live.dtype}{list(live.shape)}",
                         "replay": f"{replay.dtype}{list(replay.shape)}"})
    c = compare(replay, live, rtol, atol, equal_nan=True, strict_dtype=True)
    if c.ok:
        return None
    err = c.max_abs if c.max_abs is not None else None
    return Mismatch(name, c.mismatches, err, {"index": c.first_index, "live": c.want, "replay": c.got})


def _hint(mismatches: list) -> str:
    if not mismatches:
        return ""
    unwritten = [x.binding for x in mismatches if not x.writers]
    if unwritten:
        return (f"nothing in the capture writes {', '.join(repr(n) for n in unwritten)}, but the live step "
                "changed it: host-side code in step() (a write through .numpy() or .assign(), a value "
                "drawn in Python) ran once, at capture time, and is not in the saved graph. Move that work "
                "into a kernel, or pass the value as an input binding.")
    return ("the captured ops write these bindings but end with other values: host-side code in step() (Python "
            "control flow on array values, a .numpy() read-modify-write, a random seed drawn in Python) ran "
            "only at capture time, or step() uses an operation Warp's capture drops (see NVIDIA/warp#1675, "
            "#1663). `wrp trace` on the saved file shows which op writes what.")


def verify(step: Callable[[], None], inputs: Mapping, outputs: Mapping, device=None, rtol: float = 0.0,
           atol: float = 0.0, *, recording=None, keep: Optional[os.PathLike] = None,
           timeout: float = 600.0) -> VerifyReport:
    """Check that a saved capture of ``step`` does what ``step()`` does live.

    Args:
        step: A callable with no arguments that issues the Warp work on the
            arrays in ``inputs`` and ``outputs`` (as given to ``wrpkit.capture``).
        inputs: ``{name: wp.array}`` bound as inputs.
        outputs: ``{name: wp.array}`` bound as outputs.
        device: The device ``step`` runs on; default the arrays' device.
        rtol, atol: Tolerances (default: bit-exact; NaN equals NaN and Inf the same Inf, element by element).
        recording: A :class:`~wrpkit.Recording` of ``step`` to check instead
            of capturing it again.
        keep: A folder in which to keep the saved capture (``verify.wrp``),
            its inputs and the replayed outputs; default a temporary folder.
        timeout: Seconds allowed for the fresh-process replay.

    Returns:
        A :class:`VerifyReport`.  The arrays hold their initial contents
        again when it returns.

    Raises:
        WrpError: Bad arguments, or the step cannot be captured or saved.
    """
    from ..run.capture.recording import capture  # noqa: PLC0415
    from ..run.warp_bridge.start import get_device, synchronize  # noqa: PLC0415

    arrays = {**dict(inputs or {}), **dict(outputs or {})}
    if not arrays:
        raise WrpError("verify needs at least one input or output array", hint="Pass inputs={name: wp.array}.")
    if device is None:
        device = next(iter(arrays.values())).device
    dev = get_device(device)
    snapshot = {n: a.numpy().copy() for n, a in arrays.items()}

    def restore():
        for n, a in arrays.items():
            a.assign(snapshot[n])
        synchronize(dev)

    step()
    synchronize(dev)
    live = {n: a.numpy().copy() for n, a in arrays.items()}
    restore()
    try:
        if recording is None:
            with capture(device=dev) as recording:
                step()
            restore()
        with tempfile.TemporaryDirectory(prefix="wrpkit-verify-") as tmp:
            folder = Path(keep) if keep is not None else Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            path = recording.save(folder / "verify.wrp", inputs=dict(inputs or {}), outputs=dict(outputs or {}))
            inp, outp = folder / "verify_inputs.npz", folder / "verify_replayed.npz"
            np.savez(inp, **snapshot)
            proc = subprocess.run([sys.executable, "-c", _REPLAY_SCRIPT, os.fspath(path), os.fspath(inp),
                                   os.fspath(outp), str(dev)], capture_output=True, text=True, timeout=timeout)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
                return VerifyReport(False, [], "the saved capture does not replay in a fresh process: it depends "
                                    "on state of the capturing process (a stale pointer, a handle, a module "
                                    "not saved)", error="\n".join(tail), bindings=list(arrays))
            with np.load(outp) as z:
                replayed = {k: z[k] for k in z.files}
            from ..formats.container import open_capture  # noqa: PLC0415

            with open_capture(path) as cap:
                writers = _writers(cap.program)
                region_of = {b.name: b.region_id for b in cap.program.bindings}
    finally:
        restore()
    mismatches = []
    for name in arrays:
        if name not in replayed:
            mismatches.append(Mismatch(name, int(live[name].size), None,
                                       {"index": None, "live": "present", "replay": "missing"}))
            continue
        mm = compare_arrays(name, live[name], replayed[name], rtol, atol)
        if mm is not None:
            mm.writers = writers.get(region_of.get(name), [])
            mismatches.append(mm)
    return VerifyReport(not mismatches, mismatches, _hint(mismatches), None, list(arrays))


__all__ = ["verify", "VerifyReport", "Mismatch", "compare_arrays"]
