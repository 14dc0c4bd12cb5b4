"""The child of ``wrp trace`` and ``wrp profile``: ``python -m wrpkit.debug.child DIR``.

:func:`wrpkit.debug.isolation.run_in_child` writes ``DIR`` (the validated
capture, the inputs, ``job.json`` naming the kind of run, and the op slot); this
process loads the capture without validating it again, runs the in-process
core of that kind (:func:`wrpkit.debug.trace.run_trace` or
:func:`wrpkit.debug.profile.run_profile`) with the op slot updated before each
op, and writes ``DIR/result.json``, or ``DIR/error.json`` for a
:class:`~wrpkit.errors.WrpError`.

Nothing here prints.
"""

from __future__ import annotations

import json
import mmap
import sys
from pathlib import Path

import numpy as np

from ..errors import WrpError
from ..run.child import write_child_error, write_stage
from .isolation import SLOT


def _trace(opened, job: dict, inputs: dict, before, stage, d: Path) -> dict:
    from .trace import CHILD_TIMINGS, run_trace  # noqa: PLC0415

    dump = d / "dump" if job["dump"] else None
    result = run_trace(opened, device=job["device"], engine=job["engine"], inputs=inputs,
                       stop_at_nonfinite=job["stop_at_nonfinite"], dump=dump, before=before, stage=stage)
    stage("writing")
    data = result.to_json()
    data.update({k: getattr(result, k) for k in CHILD_TIMINGS})
    return data


def _profile(opened, job: dict, inputs: dict, before, stage, d: Path) -> dict:
    from .profile import CHILD_FIELDS, run_profile  # noqa: PLC0415

    result = run_profile(opened, device=job["device"], engine=job["engine"], inputs=inputs,
                         repeat=job["repeat"], warmup=job["warmup"], nvtx=job["nvtx"], clock=job["clock"],
                         before=before, stage=stage)
    stage("writing")
    return {"engine": result.engine, "device": result.device, "load_seconds": result.load_seconds,
            **{k: getattr(result, k) for k in CHILD_FIELDS}}


#: The child bodies, by the ``kind`` that :func:`~wrpkit.debug.isolation.run_in_child` names.
KINDS = {"trace": _trace, "profile": _profile}


def main(d: Path) -> int:
    """Run the job in ``d``; return the exit code (0, or the reported error's)."""
    from ..fileio import atomic_write  # noqa: PLC0415

    job = json.loads((d / "job.json").read_text())
    try:
        from ..environment import init_warp  # noqa: PLC0415

        init_warp(cpu_only=str(job["device"]).strip().lower() == "cpu")
        from .common import open_program  # noqa: PLC0415

        body = KINDS[job["kind"]]
        modules = {p.name: p.read_bytes() for p in Path(job["modules_dir"]).iterdir() if p.is_file()}
        opened = open_program(job["source"], modules, _validated=True)
        if (d / "annotations.bin").is_file():  # typed in memory by the parent (--kernels)
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

        data = body(opened, job, inputs, before, lambda text: write_stage(d, text), d)
        atomic_write(d / "result.json", [json.dumps(data).encode()])
        return 0
    except WrpError as e:
        return write_child_error(d, e)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
