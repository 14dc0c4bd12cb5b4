"""Debug a capture in a child process, so that a crash never takes the caller down.

``wrp trace`` and ``wrp profile`` validate the capture and the inputs here, then
:func:`run_in_child` hands a private copy of the validated bytes to a fresh
``python -m wrpkit.debug.child`` process, as
:func:`wrpkit.run.isolation.replay_in_child` does for a replay.  The child
(:mod:`wrpkit.debug.child`) loads and steps the capture; its result (and any
``dump`` files) come back through files in a private temporary directory, which
the caller reads before it is removed.

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
import struct
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, Optional

import numpy as np

from ..run.crash import crash_error
from ..run.worker import ChildCrashed, no_result_error, run_module, write_source

#: Layout of the op slot: seq, index, iteration (-1: none), path (NUL-padded UTF-8).
SLOT = struct.Struct("<qqq104s")


def as_array(value) -> np.ndarray:
    """An input as numpy, to hand to the child (where it is checked again exactly as in process)."""
    if hasattr(value, "numpy") and callable(value.numpy):
        return np.asarray(value.numpy())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(value, np.uint8)
    return np.asarray(value)


def run_in_child(opened, kind: str, job: Mapping, inputs: Optional[Mapping], *, timeout: Optional[float] = None,
                 started: Optional[float] = None,
                 collect: Optional[Callable[[Path], None]] = None) -> dict:
    """Run the child of ``kind`` (``"trace"`` or ``"profile"``) on a validated capture; return its result.

    Args:
        opened: What :func:`~wrpkit.debug.common.open_program` returned (validated here).
        kind: Which child body runs (:data:`wrpkit.debug.child.KINDS`).
        job: The child's options (JSON values).
        inputs: ``{binding: value}``; checked here before the child starts.
        timeout: Seconds for the whole run, counted from ``started``
            (a :func:`time.perf_counter` value; default now).
        collect: Called with the child's directory after the child succeeded,
            before the directory is removed (e.g. to move dump files out).

    Returns:
        The child's ``result.json``.

    Raises:
        WrpBindingError: Bad inputs (checked here, before the child starts).
        WrpCrashError: The child died of a fatal signal; the message names the
            op that was running (index, path, iteration, kind, kernel, module)
            and whether its module's digest was verified.  Nothing was written.
        WrpTimeoutError: ``timeout`` ran out; the child was killed, nothing was written.
        WrpError: What the child raised (same class and message).
    """
    from .common import input_bytes  # noqa: PLC0415

    started = time.perf_counter() if started is None else started
    inputs = dict(inputs or {})
    input_bytes(opened, inputs, lambda rid: np.zeros(opened.program.region(rid).size, np.uint8))  # check only
    with tempfile.TemporaryDirectory(prefix=f"wrpkit-{kind}-") as tmp:
        d = Path(tmp)
        source, modules_dir = write_source(opened.prepared, d)
        np.savez(d / "inputs.npz", **{k: as_array(v) for k, v in inputs.items()})
        (d / "op").write_bytes(SLOT.pack(-1, -1, -1, b""))
        if getattr(opened, "source_typing", None) is not None:  # typed in memory (--kernels): so is the child
            (d / "annotations.bin").write_bytes(bytes(opened.program.annotations))
        (d / "job.json").write_text(json.dumps({**job, "kind": kind, "source": source, "modules_dir": modules_dir}))
        left = None
        if timeout is not None:
            left = max(1e-3, timeout - (time.perf_counter() - started))
        try:
            proc = run_module("wrpkit.debug.child", d, left, timeout)
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
        if collect is not None:
            collect(d)
    return data
