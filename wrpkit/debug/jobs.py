"""The jobs of ``wrp trace``, ``wrp profile`` and ``wrp memcheck``, as a wrpkit child runs them.

:func:`wrpkit.debug.isolation.run_in_child` asks a child (``python -m wrpkit.run.contain.child``,
the one entry point of every child) for a ``job`` served by this module: the job (its kind and
options) with the descriptors of the validated capture (the user's own file, mapped there), the
module files, the inputs and the op slot, all in memory.  :func:`serve_job` loads the capture
without validating it again, runs the in-process core of that kind
(:func:`wrpkit.debug.trace.run_trace`, :func:`wrpkit.debug.profile.run_profile`,
:func:`wrpkit.debug.memcheck.run_memcheck`) with the op slot updated before each op, and returns
its result; the child answers it, or the :class:`~wrpkit.errors.WrpError` it raised.

Nothing here prints.
"""

from __future__ import annotations

import base64

import numpy as np

from ..run.contain.child import KernelOutputShown, received_capture
from ..op_slots import SLOT


def _trace(opened, job: dict, inputs: dict, before, stage) -> dict:
    from .trace import CHILD_TIMINGS, run_trace  # noqa: PLC0415

    dump = job["dump_dir"] if job["dump"] else None
    result = run_trace(opened, device=job["device"], engine=job["engine"], inputs=inputs,
                       stop_at_nonfinite=job["stop_at_nonfinite"], dump=dump, before=before, stage=stage)
    stage("writing")
    data = result.to_json()
    data.update({k: getattr(result, k) for k in CHILD_TIMINGS})
    return data


def _profile(opened, job: dict, inputs: dict, before, stage, shown=None) -> dict:
    from .profile import CHILD_FIELDS, run_profile  # noqa: PLC0415

    result = run_profile(opened, device=job["device"], engine=job["engine"], inputs=inputs,
                         repeat=job["repeat"], warmup=job["warmup"], nvtx=job["nvtx"], clock=job["clock"],
                         before=before, stage=stage, shown=shown)
    stage("writing")
    return {"engine": result.engine, "device": result.device, "load_seconds": result.load_seconds,
            **{k: getattr(result, k) for k in CHILD_FIELDS}}


def _memcheck(opened, job: dict, inputs: dict, before, stage) -> dict:
    from .memcheck import run_memcheck  # noqa: PLC0415

    return run_memcheck(opened, device=job["device"], engine=job["engine"], mode=job["mode"],
                        guard_bytes=job["guard_bytes"], inputs=inputs, before=before, stage=stage)


#: The child bodies, by the ``kind`` that :func:`~wrpkit.debug.isolation.run_in_child` names.
KINDS = {"trace": _trace, "profile": _profile, "memcheck": _memcheck}
#: The kinds whose body chooses which of its replays show their kernel output (it takes ``shown=``, a
#: context manager that shows what runs inside it): ``profile`` replays the program many times over
#: for its timings and shows the first round's stepped replay only.  Every other kind shows all it ran.
SHOWS_ITSELF = {"profile"}


def serve_job(message: dict, fds: list, stage) -> dict:
    """Run the job of ``message`` in this (child) process; its result (JSON values).

    Args:
        message: The request of :func:`~wrpkit.debug.isolation.run_in_child`: ``job`` (its ``kind``
            and options), the capture's ``modules``, the ``inputs`` and the areas' sizes.
        fds: The capture, the module files, the inputs, the op slot, and the kernels' output when
            ``message["kernel_output"]``.
        stage: ``stage(text)`` records what the child is doing, for a crash report.

    Raises:
        WrpError: What the job raised (the child answers it).
    """
    from ..run.contain.shared import SharedArea  # noqa: PLC0415
    from ..run.warp_bridge.start import init_warp  # noqa: PLC0415

    capture_fd, modules_fd, in_fd, slot_fd = fds[:4]
    job = message["job"]
    # The kernels' own output (wp.printf), when the parent asked for it (run_in_child's kernel_output).
    shown = KernelOutputShown(fds[4] if message.get("kernel_output") and len(fds) > 4 else None)
    slot = SharedArea(message["slot_size"], fd=slot_fd)
    init_warp(cpu_only=str(job["device"]).strip().lower() == "cpu")
    body = KINDS[job["kind"]]
    opened = received_capture(message, capture_fd, modules_fd)
    if message.get("annotations") is not None:  # typed in memory by the parent (--kernels)
        from ..formats.annotations import decode_annotations  # noqa: PLC0415
        from ..run.capture.source_types import retype  # noqa: PLC0415

        retype(opened, decode_annotations(base64.b64decode(message["annotations"])))
    in_area = SharedArea(message["in_size"], fd=in_fd)
    inputs = {k: in_area.view(off, n).view(np.lib.format.descr_to_dtype(descr)).reshape(shape).copy()
              for k, (off, n, descr, shape) in message["inputs"].items()}
    in_area.close()
    mm = slot.view()
    pack, encode = SLOT.pack_into, str.encode
    seq = [0]

    def before(op, index, path, iterations):
        pack(mm, 0, seq[0], index, iterations[-1] if iterations else -1, encode(path))
        seq[0] += 1

    try:
        if job["kind"] in SHOWS_ITSELF:
            return body(opened, job, inputs, before, stage, shown=shown if shown.fd is not None else None)
        with shown:
            return body(opened, job, inputs, before, stage)
    finally:
        shown.close()
