"""The clocks ``wrp profile`` times a launch with, NVTX ranges through ctypes, and the stepping
machine that times each leaf launch alone (:class:`TimedMachine`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import time

import numpy as np

from ..errors import WrpNotFoundError
from . import stepper as st

#: ``clock="auto"`` on a CPU device takes the thread's CPU time when a whole replay's wall time is
#: more than this many times its CPU time (the thread waited for a core: a busy machine).
BUSY_WALL_OVER_CPU = 1.3


class HostTimer:
    """A host clock around a launch (the engines return once the launch is done, synchronized on CUDA).

    ``clock="wall"`` reads the monotonic wall clock; ``clock="cpu"`` this
    thread's CPU time, which Warp's CPU kernels run on: on a machine shared
    with other work it leaves out the time the thread waited for a core.
    """

    def __init__(self, clock: str = "wall"):
        self.read = time.thread_time_ns if clock == "cpu" else time.perf_counter_ns
        self.name = "host-cpu" if clock == "cpu" else "host"

    def __call__(self, launch) -> float:
        read = self.read
        t0 = read()
        launch()
        return (read() - t0) * 1e-6


class CudaEventTimer:
    """CUDA events recorded on the launching stream just before and just after a launch (python engine)."""

    name = "cuda-events"

    def __init__(self, device):
        from ..run.warp_bridge import start as warp_start  # noqa: PLC0415

        self.warp = warp_start
        self.device = warp_start.get_device(device)
        self.start, self.end = warp_start.timing_events(self.device)

    def __call__(self, launch) -> float:
        stream = self.device.stream
        stream.record_event(self.start)
        launch()
        stream.record_event(self.end)
        self.warp.synchronize(self.device)
        return self.warp.elapsed_ms(self.start, self.end)


class Nvtx:
    """``nvtxRangePushA``/``nvtxRangePop`` from the NVTX library (``libnvToolsExt``), through ctypes.

    Raises:
        WrpNotFoundError: No NVTX library can be loaded.
    """

    NAMES = ("libnvToolsExt.so.1", "libnvToolsExt.so", "nvToolsExt64_1.dll")

    def __init__(self):
        lib = None
        found = ctypes.util.find_library("nvToolsExt")
        for name in ((found,) if found else ()) + self.NAMES:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise WrpNotFoundError("--nvtx needs the NVTX library (libnvToolsExt.so.1), which cannot be loaded here",
                                   hint="Install the CUDA toolkit's NVTX library or add its folder to "
                                        "LD_LIBRARY_PATH; or profile without --nvtx.")
        lib.nvtxRangePushA.argtypes = [ctypes.c_char_p]
        lib.nvtxRangePushA.restype = ctypes.c_int
        lib.nvtxRangePop.restype = ctypes.c_int
        self.push, self.pop = lib.nvtxRangePushA, lib.nvtxRangePop


class TimedMachine(st.Machine):
    """A :class:`~wrpkit.debug.stepper.Machine` whose ``run_leaf`` times the launch alone (not the control write)."""

    def __init__(self, stepper, engine, timer, nvtx=None):
        super().__init__(stepper, engine)
        self.timer, self.nvtx = timer, nvtx
        self._launch = engine.launcher()
        self.last_ms = 0.0
        self.label = b""

    def run_leaf(self, leaf: int) -> None:
        idx, vals = self.stepper.paths[leaf]
        ctl = self._ctl
        ctl[idx] = vals
        if self._ctl_view is None:
            self.engine.write(st.CONTROL_BINDING, ctl)
        if self.nvtx is not None:
            self.nvtx.push(self.label)
            self.last_ms = self.timer(self._launch)
            self.nvtx.pop()
        else:
            self.last_ms = self.timer(self._launch)


def choose_clock(whole_launch, tries: int = 3) -> dict:
    """The clock ``clock="auto"`` times a CPU device with: the whole graph replayed ``tries`` times,
    timed by the wall clock and by this thread's CPU time at once; the CPU time when the wall time
    is more than :data:`BUSY_WALL_OVER_CPU` times it (the thread waited for a core), else the wall
    clock (which also counts what the CPU time does not: page faults served, memory bandwidth)."""
    walls, cpus = [], []
    for _ in range(tries):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        whole_launch()
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        walls.append((w1 - w0) * 1e-6)
        cpus.append((c1 - c0) * 1e-6)
    wall, cpu = float(np.median(walls)), float(np.median(cpus))
    busy = cpu > 0 and wall > BUSY_WALL_OVER_CPU * cpu
    why = (f"wall time {wall / cpu:.2f}x the CPU time: the thread waited for a core" if busy
           else "wall time close to the CPU time: not busy")
    return {"clock": "cpu" if busy else "wall", "wall_ms": wall, "cpu_ms": cpu, "why": why}


__all__ = ["BUSY_WALL_OVER_CPU", "HostTimer", "CudaEventTimer", "Nvtx", "TimedMachine",
           "choose_clock"]
