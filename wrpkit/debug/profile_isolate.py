"""Profile in a child process, so that a crash never takes the caller down (``wrp profile``).

The same arrangement as :mod:`wrpkit.debug.trace_isolate`: the parent validates
the capture and the inputs, hands a private copy of the validated bytes to a
fresh ``python -m wrpkit.debug.profile_isolate`` process, and reads the profile
back as JSON.  Just before each op runs, the child overwrites the op slot of a
shared file mapping (:data:`wrpkit.debug.trace_isolate.SLOT`), so that a crash
names the op that was running (index, path, WHILE iteration) without bisection.
The child also times the plain replay of the whole graph; the parent times
nothing, so the child's start does not count in any figure.

Nothing here prints.
"""

from __future__ import annotations

import json
import mmap
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from ..errors import WrpError
from ..run import isolate as iso
from .trace_isolate import SLOT, _as_array

_FIELDS = ("ops", "kernels", "top_level", "total_ms", "replay_ms", "floor_ms", "launch_floor_ms", "timer", "repeat",
           "warmup", "step_ms", "replay_rounds_ms")


def profile_in_child(opened, *, device: str, engine: str, inputs: Optional[Mapping], repeat: int, warmup: int,
                     nvtx: bool = False, clock: str = "wall", timeout: Optional[float] = None,
                     started: Optional[float] = None):
    """Profile a validated capture in a child process; the body of ``profile(..., isolate=True)``.

    Args:
        opened: What :func:`~wrpkit.debug.common.open_program` returned (validated here).
        timeout: Seconds for the whole profile, counted from ``started``
            (a :func:`time.perf_counter` value; default now).
        Others: as :func:`wrpkit.debug.profile.profile`.

    Returns:
        A :class:`~wrpkit.debug.profile.ProfileResult`.

    Raises:
        WrpBindingError: Bad inputs (checked here, before the child starts).
        WrpCrashError: The child died of a fatal signal; the message names the op that was running.
        WrpTimeoutError: ``timeout`` ran out; the child was killed.
        WrpError: What the child raised (same class and message).
    """
    from .common import input_bytes  # noqa: PLC0415
    from .profile import ProfileResult  # noqa: PLC0415

    started = time.perf_counter() if started is None else started
    inputs = dict(inputs or {})
    input_bytes(opened, inputs, lambda rid: np.zeros(opened.program.region(rid).size, np.uint8))  # check only
    with tempfile.TemporaryDirectory(prefix="wrpkit-profile-") as tmp:
        d = Path(tmp)
        source, modules_dir = iso.write_source(opened.prepared, d)
        np.savez(d / "inputs.npz", **{k: _as_array(v) for k, v in inputs.items()})
        (d / "op").write_bytes(SLOT.pack(-1, -1, -1, b""))
        if getattr(opened, "source_typing", None) is not None:  # typed in memory (--kernels): so is the child
            (d / "annotations.bin").write_bytes(bytes(opened.program.annotations))
        job = {"source": source, "modules_dir": modules_dir, "device": device, "engine": engine,
               "repeat": int(repeat), "warmup": int(warmup), "nvtx": bool(nvtx),
               "clock": clock}
        (d / "job.json").write_text(json.dumps(job))
        left = None
        if timeout is not None:
            left = max(1e-3, timeout - (time.perf_counter() - started))
        try:
            proc = iso.run_module("wrpkit.debug.profile_isolate", d, left, timeout)
        except iso.ChildCrashed as crash:
            seq, index, iteration, path = SLOT.unpack((d / "op").read_bytes()[:SLOT.size])
            ran = crash.stage == "replaying" and seq >= 0
            raise iso.crash_error(opened.prepared, crash.signum, "replaying" if ran else "loading",
                                  index if ran else None, True,
                                  path=path.rstrip(b"\0").decode("utf-8", "replace") if ran else None,
                                  iteration=iteration if ran and iteration >= 0 else None) from None
        if proc.returncode != 0 or not (d / "result.json").is_file():
            raise iso.no_result_error(proc)
        data = json.loads((d / "result.json").read_text())
    result = ProfileResult(str(opened.path) if opened.path is not None else "<bytes>", data["engine"],
                           data["device"], **{k: data[k] for k in _FIELDS}, load_seconds=data["load_seconds"])
    result.program = opened.program
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
        from .profile import run_profile  # noqa: PLC0415

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

        result = run_profile(opened, device=job["device"], engine=job["engine"], inputs=inputs,
                             repeat=job["repeat"], warmup=job["warmup"], nvtx=job["nvtx"], clock=job["clock"],
                             before=before, stage=lambda text: iso.write_stage(d, text))
        iso.write_stage(d, "writing")
        data = {"engine": result.engine, "device": result.device, "load_seconds": result.load_seconds,
                **{k: getattr(result, k) for k in _FIELDS}}
        atomic_write(d / "result.json", [json.dumps(data).encode()])
        return 0
    except WrpError as e:
        return iso.write_child_error(d, e)


if __name__ == "__main__":
    sys.exit(_child_main(Path(sys.argv[1])))
