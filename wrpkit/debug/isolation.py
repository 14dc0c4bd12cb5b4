"""Debug a capture in a child process, so that a crash never takes the caller down.

``wrp trace``, ``wrp profile`` and ``wrp memcheck`` validate the capture and the inputs here,
then :func:`run_in_child` starts a wrpkit child (:class:`~wrpkit.run.contain.served.ServedChild`:
the one kind of child, started, asked and timed out as a contained replay's is) and hands it the
capture the way a contained replay does (:class:`wrpkit.run.contain.worker.ChildSource`): the
user's own file, reopened and checked to be the very file that was validated, or one memory file
for bytes.  The job, the inputs (one shared memory file) and the op slot go over its socket as a
``job`` request served by :mod:`wrpkit.debug.jobs`, which answers with its result.  Nothing is written to disk, except
``dump`` files, which the child writes into a private folder the caller moves
into place once the child succeeded.

The child runs one op per launch, so it knows which op a crash happens in: just
before each op runs it overwrites the op slot (:mod:`wrpkit.op_slots`: the
op's sequence number, top-level index, innermost WHILE iteration and path) in a
shared memory file.  The kernel keeps the page when the child dies of a signal,
and the parent reads it back to name the op with
:func:`wrpkit.run.contain.crash.crash_error`, with no second run.

Nothing here prints.
"""

from __future__ import annotations

import base64
import os
import tempfile
import time
from contextlib import ExitStack, closing, nullcontext
from pathlib import Path
from typing import Callable, Mapping, Optional

import numpy as np

from ..deadline import Deadline
from ..op_slots import EMPTY, SLOT, read_slot
from ..run.contain.crash import crash_error
from ..run.contain.served import ChildCrashed, ServedChild
from ..run.contain.spawn import kernel_output_of
from ..run.contain.worker import ChildSource


def as_array(value) -> np.ndarray:
    """An input as numpy, to hand to the child (where it is checked again exactly as in process)."""
    if hasattr(value, "numpy") and callable(value.numpy):
        return np.asarray(value.numpy())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(value, np.uint8)
    return np.asarray(value)


def run_in_child(opened, kind: str, job: Mapping, inputs: Optional[Mapping], *, timeout: Optional[float] = None,
                 started: Optional[float] = None,
                 collect: Optional[Callable[[Path], None]] = None, env: Optional[Mapping] = None,
                 crashed: Optional[Callable] = None, kernel_output=None) -> dict:
    """Run the child of ``kind`` (``"trace"`` or ``"profile"``) on a validated capture; return its result.

    Args:
        opened: What :func:`~wrpkit.debug.common.open_program` returned (validated here).
        kind: Which child body runs (:data:`wrpkit.debug.jobs.KINDS`).
        job: The child's options (JSON values).
        inputs: ``{binding: value}``; checked here before the child starts.
        timeout: Seconds for the whole run, counted from ``started``
            (a :func:`time.perf_counter` value; default now).
        collect: Given, the child writes ``job["dump"]`` files into the
            ``dump`` folder of a private temporary folder, and ``collect`` is
            called with that folder after the child succeeded, before it is
            removed (to move the files into place).  None: no folder is made.
        kernel_output: Where the kernels' own output (``wp.printf``) goes: a stream, a
            :class:`~wrpkit.run.contain.spawn.KernelOutput`, ``"stdout"``, or None (not shown: it stays in
            the child's output, which a crash's ``stderr`` (:func:`~wrpkit.run.contain.spawn.output_tail`)
            quotes as before).  All of it is out before this returns (a crash too).  Every kind
            shows all it ran, except those of :data:`wrpkit.debug.jobs.SHOWS_ITSELF`, which
            choose (``profile``: the first round's stepped replay only).  Warp's own messages are
            never part of it.

    Returns:
        The child's result (JSON values).

    Raises:
        WrpBindingError: Bad inputs (checked here, before the child starts).
        WrpCrashError: The child died of a fatal signal; the message names the
            op that was running (index, path, iteration, kind, kernel, module)
            and whether its module's digest was verified.  Nothing was written.
        WrpTimeoutError: ``timeout`` ran out; the child was killed, nothing was written.
        WrpError: What the child raised (same class and message).
    """
    from ..run.contain.shared import SharedArea, layout  # noqa: PLC0415
    from .common import input_bytes  # noqa: PLC0415

    started = time.perf_counter() if started is None else started
    inputs = dict(inputs or {})
    input_bytes(opened, inputs, lambda rid: np.zeros(opened.model.region(rid).size, np.uint8))  # check only
    arrays = {k: np.ascontiguousarray(as_array(v)) for k, v in inputs.items()}
    in_at, in_size = layout({k: a.nbytes for k, a in arrays.items()})
    # The dump folder (if any) goes last: the child, which may still be writing into it, is ended first.
    with _private_folder(kind) if collect is not None else nullcontext() as d, ExitStack() as held:
        source = ChildSource(opened)
        held.callback(source.close)
        in_area, slot = (held.enter_context(closing(SharedArea(in_size, "wrpkit-inputs"))),
                         held.enter_context(closing(SharedArea(SLOT.size, "wrpkit-op"))))
        for k, (off, n) in in_at.items():
            if n:
                in_area.view(off, n)[:] = arrays[k].reshape(-1).view(np.uint8)
        slot.view()[:] = np.frombuffer(EMPTY, np.uint8)
        child = ServedChild(env=env)
        message = {"job": {**job, "kind": kind, "dump_dir": os.path.join(d, "dump") if d else None},
                   "device": job["device"], "modules": source.modules, "modules_size": source.modules_area.size,
                   "inputs": {k: [off, n, np.lib.format.dtype_to_descr(arrays[k].dtype), list(arrays[k].shape)]
                              for k, (off, n) in in_at.items()},
                   "in_size": in_size, "slot_size": SLOT.size}
        if getattr(opened, "source_typing", None) is not None:  # typed in memory (--kernels): so is the child
            message["annotations"] = base64.b64encode(bytes(opened.model.annotations)).decode("ascii")
        shown, owned = kernel_output_of(kernel_output)
        if owned:
            held.callback(shown.close)
        fds = [source.capture_fd, source.modules_area.fd, in_area.fd, slot.fd]
        if shown is not None:
            message["kernel_output"] = True
            fds.append(shown.fd())
            held.callback(shown.flush)  # what the child printed, also when it crashed or timed out
        held.callback(child.stop)  # a timeout, Ctrl-C or an error here never leaves it running on its own
        child.start()
        deadline = Deadline.after(timeout, spent=time.perf_counter() - started)
        answer, _, deadline = child.ask_job("wrpkit.debug.jobs", message, fds, deadline)
        if answer is None or "error" in answer:
            ended = child.ended(answer, deadline)
            if isinstance(ended, ChildCrashed):
                record = read_slot(slot.view())
                if crashed is not None:
                    answer = crashed(ended, record)
                    if answer is not None:
                        return answer
                ran = ended.stage == "replaying" and record.ran
                # Replaying with no op begun yet is still the load; any other stage is said as it was.
                said = "loading" if ended.stage == "replaying" and not ran else ended.stage
                raise crash_error(opened, ended.signum, said,
                                  record.index if ran else None, path=record.path if ran else None,
                                  iteration=record.iteration if ran else None) from None
            raise ended
        held.close()  # the child has ended before its files are collected
        if collect is not None:
            collect(Path(d))
        return answer["result"]


def _private_folder(kind: str):
    """The child's private folder for files it writes (``$TMPDIR``), removed when done.

    Raises:
        WrpIOError: It cannot be made (``$TMPDIR`` full or read-only): the place and the reason (exit 1).
    """
    try:
        return tempfile.TemporaryDirectory(prefix=f"wrpkit-{kind}-")
    except OSError as e:
        from ..errors import WrpIOError  # noqa: PLC0415

        raise WrpIOError(f"cannot create a temporary folder in {tempfile.gettempdir()}: {e.strerror or e}",
                         hint="Set TMPDIR to a writable folder with room.") from None
