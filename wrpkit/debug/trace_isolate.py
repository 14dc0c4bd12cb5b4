"""Trace in a child process, so that a crash never takes the caller down (``wrp trace``).

The parent validates the capture and the inputs (:func:`wrpkit.debug.trace.trace`),
then :func:`trace_in_child` hands a private copy of the validated bytes to a fresh
``python -m wrpkit.debug.trace_isolate`` process, as
:func:`wrpkit.run.isolation.replay_in_child` does for a replay.  The child loads and
steps the capture; the trace (and ``dump`` files) come back through files in a
private temporary directory, and the parent moves the dump files to their folder
only after the child succeeded.

The child runs one op per launch, so it knows which op a crash happens in: just
before each op runs it overwrites a small fixed-size slot of a shared file mapping
(:data:`SLOT`: the op's sequence number, top-level index, innermost WHILE iteration
and path).  The kernel keeps the page when the child dies of a signal, and the
parent reads it back to name the op with :func:`wrpkit.run.crash.crash_error`.
No bisection is needed.

Nothing here prints.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from ..errors import WrpError
from ..run.child import write_child_error, write_stage
from ..run.crash import crash_error
from ..run.worker import ChildCrashed, no_result_error, run_module, write_source

#: Layout of the op slot: seq, index, iteration (-1: none), path (NUL-padded UTF-8).
SLOT = struct.Struct("<qqq104s")
_TIMINGS = ("digest_seconds", "step_seconds", "load_seconds", "digest_cpu_seconds", "step_cpu_seconds")


def _as_array(value) -> np.ndarray:
    """An input as numpy, to hand to the child (where it is checked again exactly as in process)."""
    if hasattr(value, "numpy") and callable(value.numpy):
        return np.asarray(value.numpy())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(value, np.uint8)
    return np.asarray(value)


def _publish_dump(src: Path, dst: Path) -> None:
    """Move the child's dump files into ``dst`` (each file replaced atomically)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        target = dst / f.name
        try:
            os.replace(f, target)
        except OSError:  # another file system: copy next to the target, then rename
            tmp = dst / f".{f.name}.wrpkit-tmp"
            shutil.copyfile(f, tmp)
            os.replace(tmp, target)


def trace_in_child(opened, *, device: str, engine: str, inputs: Optional[Mapping], stop_at_nonfinite: bool,
                   dump=None, timeout: Optional[float] = None, started: Optional[float] = None):
    """Step a validated capture in a child process; the body of ``trace(..., isolate=True)``.

    Args:
        opened: What :func:`~wrpkit.debug.common.open_program` returned (validated here).
        timeout: Seconds for the whole trace, counted from ``started``
            (a :func:`time.perf_counter` value; default now).
        Others: as :func:`wrpkit.debug.trace.trace`.

    Returns:
        A :class:`~wrpkit.debug.trace.TraceResult`.

    Raises:
        WrpBindingError: Bad inputs (checked here, before the child starts).
        WrpCrashError: The child died of a fatal signal; the message names the
            op that was running (index, path, iteration, kind, kernel, module)
            and whether its module's digest was verified.  Nothing was written.
        WrpTimeoutError: ``timeout`` ran out; the child was killed, nothing was written.
        WrpError: What the child raised (same class and message).
    """
    from .common import input_bytes  # noqa: PLC0415
    from .trace import TraceResult  # noqa: PLC0415

    started = time.perf_counter() if started is None else started
    inputs = dict(inputs or {})
    input_bytes(opened, inputs, lambda rid: np.zeros(opened.program.region(rid).size, np.uint8))  # check only
    with tempfile.TemporaryDirectory(prefix="wrpkit-trace-") as tmp:
        d = Path(tmp)
        source, modules_dir = write_source(opened.prepared, d)
        np.savez(d / "inputs.npz", **{k: _as_array(v) for k, v in inputs.items()})
        (d / "op").write_bytes(SLOT.pack(-1, -1, -1, b""))
        if getattr(opened, "source_typing", None) is not None:  # typed in memory (--kernels): so is the child
            (d / "annotations.bin").write_bytes(bytes(opened.program.annotations))
        job = {"source": source, "modules_dir": modules_dir, "device": device, "engine": engine,
               "stop_at_nonfinite": bool(stop_at_nonfinite), "dump": dump is not None}
        (d / "job.json").write_text(json.dumps(job))
        left = None
        if timeout is not None:
            left = max(1e-3, timeout - (time.perf_counter() - started))
        try:
            proc = run_module("wrpkit.debug.trace_isolate", d, left, timeout)
        except ChildCrashed as crash:
            seq, index, iteration, path = SLOT.unpack((d / "op").read_bytes()[:SLOT.size])
            ran = crash.stage == "replaying" and seq >= 0
            raise crash_error(opened.prepared, crash.signum, "replaying" if ran else "loading",
                                  index if ran else None, True,
                                  path=path.rstrip(b"\0").decode("utf-8", "replace") if ran else None,
                                  iteration=iteration if ran and iteration >= 0 else None) from None
        if proc.returncode != 0 or not (d / "result.json").is_file():
            raise no_result_error(proc)
        data = json.loads((d / "result.json").read_text())
        result = TraceResult(str(opened.path) if opened.path is not None else "<bytes>", data["engine"],
                             data["device"], data["ops"], data["first_nonfinite"], None, data["unknown_dtypes"],
                             data.get("unchecked") or [], **{k: data[k] for k in _TIMINGS})
        if dump is not None:
            _publish_dump(d / "dump", Path(dump))
    return result


# ---------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------


def _child_main(d: Path) -> int:
    from ..fileio import atomic_write  # noqa: PLC0415

    job = json.loads((d / "job.json").read_text())
    try:
        from ..environment import init_warp  # noqa: PLC0415

        init_warp(cpu_only=str(job["device"]).strip().lower() == "cpu")
        from .common import open_program  # noqa: PLC0415
        from .trace import run_trace  # noqa: PLC0415

        modules = {p.name: p.read_bytes() for p in Path(job["modules_dir"]).iterdir() if p.is_file()}
        opened = open_program(job["source"], modules, _validated=True)
        if (d / "annotations.bin").is_file():
            from ..formats.annotations import decode_annotations  # noqa: PLC0415
            from ..run.source_types import retype  # noqa: PLC0415

            retype(opened, decode_annotations((d / "annotations.bin").read_bytes()))
        with np.load(d / "inputs.npz", allow_pickle=False) as z:
            inputs = {k: z[k] for k in z.files}
        with open(d / "op", "r+b") as f:
            slot = mmap.mmap(f.fileno(), SLOT.size)
        pack, encode = SLOT.pack_into, str.encode
        seq = [0]

        def before(op, index, path, iterations):
            pack(slot, 0, seq[0], index, iterations[-1] if iterations else -1, encode(path))
            seq[0] += 1

        dump = d / "dump" if job["dump"] else None
        result = run_trace(opened, device=job["device"], engine=job["engine"], inputs=inputs,
                           stop_at_nonfinite=job["stop_at_nonfinite"], dump=dump, before=before,
                           stage=lambda text: write_stage(d, text))
        write_stage(d, "writing")
        data = result.to_json()
        data.update({k: getattr(result, k) for k in _TIMINGS})
        atomic_write(d / "result.json", [json.dumps(data).encode()])
        return 0
    except WrpError as e:
        return write_child_error(d, e)


if __name__ == "__main__":
    sys.exit(_child_main(Path(sys.argv[1])))
