"""The child of ``wrp trace``, ``wrp profile`` and ``wrp memcheck``: ``python -m wrpkit.debug.child --serve FD``.

:func:`wrpkit.debug.isolation.run_in_child` sends one message over the socket
``FD``: the job (the kind of run and its options) with the descriptors of the
validated capture (the user's own file, mapped here), the module files, the
inputs, the op slot and the stage, all in memory.  This process loads the
capture without validating it again, runs the in-process core of that kind
(:func:`wrpkit.debug.trace.run_trace` or :func:`wrpkit.debug.profile.run_profile`)
with the op slot updated before each op, and answers ``{"result": ...}``, or
``{"error": ...}`` for a :class:`~wrpkit.errors.WrpError`.

Nothing here prints.
"""

from __future__ import annotations

import base64
import socket
import sys

import numpy as np

from ..errors import WrpError
from ..run.contain.child import KernelOutputShown, error_info, received_capture, set_stage
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


def main(sock_fd: int) -> int:
    """Run the job that comes over socket ``sock_fd`` and answer it; return the exit code (0, or the error's)."""
    from ..run.contain.shared import ChannelClosed, SharedArea, receive, send  # noqa: PLC0415

    sock = socket.socket(fileno=sock_fd)
    try:
        message, fds = receive(sock)
    except ChannelClosed:
        return 0
    capture_fd, modules_fd, in_fd, slot_fd, stage_fd = fds[:5]
    job = message["job"]
    # The kernels' own output (wp.printf), when the parent asked for it (run_in_child's kernel_output).
    shown = KernelOutputShown(fds[5] if message.get("kernel_output") and len(fds) > 5 else None)
    try:
        stage = SharedArea(message["stage_size"], fd=stage_fd)
        slot = SharedArea(message["slot_size"], fd=slot_fd)
        from ..run.warp_bridge.start import init_warp  # noqa: PLC0415

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

        if job["kind"] in SHOWS_ITSELF:
            data = body(opened, job, inputs, before, lambda text: set_stage(stage, text),
                        shown=shown if shown.fd is not None else None)
        else:
            with shown:
                data = body(opened, job, inputs, before, lambda text: set_stage(stage, text))
        send(sock, {"result": data})
        return 0
    except WrpError as e:
        send(sock, {"error": error_info(e)})
        return e.exit_code


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(main(int(sys.argv[2])))
    sys.exit(2)
