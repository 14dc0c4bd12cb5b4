"""A capture loaded in this process for replay: one interface, whichever engine runs it.

Every in-process replay in wrpkit drives the loaded graph through this interface:

* a contained replay's child (:mod:`wrpkit.run.contain.child`): ``run`` requests, the second
  run that names a crashing op (``op_slots``), and a ``wrp regress`` case;
* the stepper of ``wrp trace``, ``slice``, ``profile`` and ``memcheck``
  (:mod:`wrpkit.debug.stepper`), one leaf op per launch.

There are two engines behind it: :class:`WarpLoaded` (Warp's Python API: a
:class:`~wrpkit.run.load.program.Program`) and :class:`NativeLoaded` (the C++ replayer's C API in
this process: a :class:`~wrpkit.run.replay.native_api.NativeGraph`).  Both take and give whole
bindings as ``uint8`` bytes:

* :meth:`view` a live zero-copy view (CPU; None elsewhere), :meth:`read` a copy, :meth:`region`
  whichever of the two there can be, :meth:`write` the whole binding;
* :meth:`launch` replays ``count`` times and waits for the device; :meth:`launcher` is one replay
  that does not wait where the engine would (a timer's own launch);
* :meth:`timed` replays ``warmup`` untimed and ``repeat`` timed times:
  ``(host ms each, device ms each or None)``;
* :meth:`all_ran` says every op ran (a crash from then on is reported as after the last op, where
  an op slot is kept), :meth:`reset` restores all of the graph's memory to the captured bytes
  (Warp's route only: the C API cannot), and :meth:`close`.

:func:`open_loaded` loads bytes the caller made (the stepper's rewritten program) with either.
Whole-file replays that run in another process (``wrp-replay``, a child) are
:mod:`wrpkit.run.replay.engines`, which uses these in its child.
"""

from __future__ import annotations

import os
import time
from typing import Optional

import numpy as np

from ...errors import WrpError, WrpRuntimeError

#: The engines, by the name ``--engine`` gives them.
ENGINE_NAMES = ("python", "native")


class WarpLoaded:
    """A capture loaded through Warp's Python API.

    Args:
        program: The loaded :class:`~wrpkit.run.load.program.Program` (closed by :meth:`close`).

    Attributes:
        program: It (for what only Warp's route has: ``reset``, the graph itself).
        is_cpu: Whether it runs on the CPU (views are live there).
    """

    name = "python"

    def __init__(self, program):
        self.program = program
        self.is_cpu = bool(program.device.is_cpu)
        self._queue = None  # launcher(), once launch() made it

    @classmethod
    def open(cls, wrp_bytes, modules: dict, device: str, *, made_from_valid: bool = False) -> "WarpLoaded":
        """Validate and load WRP1 bytes (``wrpkit.load``).

        ``made_from_valid``: the bytes were made in this process from a capture validated here (the
        stepper's rewriting of it): decoded, not validated a second time.

        Raises:
            WrpError: As :func:`wrpkit.load` (a bad image, missing modules, Warp's refusal).
        """
        if made_from_valid:
            from ..load.prepare import prepare  # noqa: PLC0415
            from ..load.program import load_prepared  # noqa: PLC0415

            prep = prepare(wrp_bytes, modules, verify_checksums=False, allow_raw_pointers=True, _validated=True)
            program = load_prepared(prep, device)
        else:
            from .runtime import load  # noqa: PLC0415

            program = load(wrp_bytes, device=device, modules=modules)
        # The image is bytes made for this load: held for reset() and pickling, which a loaded
        # engine never uses, it would be one more copy of the capture's data for the engine's life.
        program.release_captured()
        return cls(program)

    def view(self, name: str) -> Optional[np.ndarray]:
        """A live zero-copy ``uint8`` view of a binding's memory (CPU), else None."""
        return self.program.region_bytes(name) if self.is_cpu else None

    def read(self, name: str) -> np.ndarray:
        """A copy of a binding's bytes."""
        return self.program.read_bytes(name)

    def region(self, name: str) -> np.ndarray:
        """A binding's bytes: live on the CPU, a copy elsewhere."""
        return self.program.region_bytes(name)

    def write(self, name: str, data) -> None:
        """Write a binding's whole region from ``uint8`` bytes (any dtype's bytes: reinterpreted)."""
        self.program.write_bytes(name, np.ascontiguousarray(data).reshape(-1).view(np.uint8))

    def launch(self, count: int = 1) -> None:
        """Replay ``count`` times and wait for the device.

        Raises:
            WrpRuntimeError: Warp refused (its message).
        """
        from ..warp_bridge.start import synchronize  # noqa: PLC0415

        if self._queue is None:  # made once: the stepper launches once per op
            self._queue = self.launcher()
        queue = self._queue
        for _ in range(count):
            queue()
        if not self.is_cpu:
            synchronize(self.program.device)

    def launcher(self):
        """A call that replays once without waiting for the device: Warp's ``capture_launch``, which
        returns before a CUDA graph has run (a timer records its end event right after it, so the
        host's wait is not in the measured span).

        The call raises WrpRuntimeError where Warp refused (its message).
        """
        from ..warp_bridge.start import launcher  # noqa: PLC0415

        graph, capture_launch = self.program.graph, launcher()

        def launch():
            try:
                capture_launch(graph)
            except RuntimeError as e:
                raise WrpRuntimeError(f"Warp failed to replay an op: {e}") from None

        return launch

    def timed(self, warmup: int, repeat: int) -> tuple:
        """Replay ``warmup`` untimed then ``repeat`` timed times: ``(host_ms, device_ms or None)``.

        On CUDA each timed replay is bracketed by CUDA events (``device_ms``) and waited for.

        Raises:
            WrpError: Warp refused (:func:`wrpkit.environment.warp_replay_error`: a WHILE past
                Warp's guard is said as such).
        """
        from ...environment import warp_replay_error  # noqa: PLC0415
        from ..warp_bridge.start import elapsed_ms, launcher, synchronize, timing_events  # noqa: PLC0415

        prog = self.program
        graph, launch = prog.graph, launcher()
        perf = time.perf_counter
        host_ms, device_ms = [], []
        try:
            for _ in range(warmup):
                launch(graph)
            if prog.device.is_cuda:
                synchronize(prog.device)
                stream = prog.device.stream
                start, end = timing_events(prog.device)
                for _ in range(repeat):
                    t0 = perf()
                    stream.record_event(start)
                    launch(graph)
                    stream.record_event(end)
                    synchronize(prog.device)
                    host_ms.append((perf() - t0) * 1e3)
                    device_ms.append(elapsed_ms(start, end))
                return host_ms, device_ms
            for _ in range(repeat):
                t0 = perf()
                launch(graph)
                host_ms.append((perf() - t0) * 1e3)
        except RuntimeError as e:
            raise warp_replay_error(str(e)) from None
        return host_ms, None

    def all_ran(self) -> None:
        """Every op ran (nothing to record: Warp's route keeps no op slot)."""

    def reset(self) -> None:
        """Restore all of the graph's memory, bindings or not, to the captured bytes (:meth:`Program.reset
        <wrpkit.run.load.program.Program.reset>`)."""
        self.program.reset()

    def close(self) -> None:
        self.program.close()


class NativeLoaded:
    """A capture loaded through the C++ replayer's C API (``libwrp_replay``), in this process.

    Args:
        graph: The opened :class:`~wrpkit.run.replay.native_api.NativeGraph` (closed by :meth:`close`).

    Attributes:
        graph: It (for what only the C API has: the op slot).
        is_cpu: Whether it runs on the CPU (views are live there).
    """

    name = "native"

    def __init__(self, graph):
        self.graph = graph
        self.is_cpu = graph.device.startswith("cpu")
        self._views = {}
        self._slot_fd = -1

    @classmethod
    def open(cls, wrp_bytes, modules: dict, device: str, *, op_slots: bool = False,
             allow_raw_pointers: bool = False) -> "NativeLoaded":
        """Validate and open WRP1 bytes through the C API (``op_slots``: a copy of the graph that writes
        the op slot before each op, :mod:`wrpkit.op_slots`).

        Raises:
            WrpError: The library refused the bytes (its message), or is not installed.
        """
        from .native_api import NativeGraph  # noqa: PLC0415

        return cls(NativeGraph(wrp_bytes, modules, device, op_slots=op_slots,
                               allow_raw_pointers=allow_raw_pointers))

    def view(self, name: str) -> Optional[np.ndarray]:
        """A live zero-copy ``uint8`` view of a binding's memory (CPU), else None."""
        if not self.is_cpu:
            return None
        v = self._views.get(name)
        if v is None:
            v = self._views[name] = self.graph.view(name)
        return v

    def read(self, name: str) -> np.ndarray:
        """A copy of a binding's bytes."""
        return self.graph.get(name)

    def region(self, name: str) -> np.ndarray:
        """A binding's bytes: live on the CPU, a copy elsewhere."""
        v = self.view(name)
        return self.read(name) if v is None else v

    def write(self, name: str, data) -> None:
        """Write a binding's whole region from ``uint8`` bytes (any dtype's bytes: reinterpreted)."""
        self.graph.set(name, np.ascontiguousarray(data).reshape(-1).view(np.uint8))

    def launch(self, count: int = 1) -> None:
        """Replay ``count`` times (the library waits for the device)."""
        self.graph.run(count)

    def launcher(self):
        """A call that replays once (the library waits for its own stream: there is nothing to leave out)."""
        return self.launch

    def timed(self, warmup: int, repeat: int) -> tuple:
        """Replay ``warmup`` untimed then ``repeat`` timed times: ``(host_ms, None)`` (wall clock)."""
        perf = time.perf_counter
        if warmup:
            self.graph.run(warmup)
        host_ms = []
        for _ in range(repeat):
            t0 = perf()
            self.graph.run(1)
            host_ms.append((perf() - t0) * 1e3)
        return host_ms, None

    def reset(self) -> None:
        """Refused: the C API has no way to restore the memory no binding names (a fresh open does).

        Raises:
            WrpError: Always.
        """
        raise WrpError("the native engine cannot restore a loaded graph's memory to the captured bytes",
                       hint="Open the capture again, or use the python engine.")

    def guard_op_slot(self, fd: int) -> None:
        """Have the op slot copied into memory file ``fd`` if this process dies of a crash signal
        (the descriptor is held open for the handler, and closed by :meth:`close`).

        Raises:
            WrpError: The program holds no op slot (the message says why).
        """
        self.graph.guard_op_slot(fd)
        self._slot_fd = fd

    def all_ran(self) -> None:
        """Every op ran: the guard is lifted and the slot file says so, so that a crash from now on
        (Warp releasing a heap a launch corrupted) is reported as coming after the last op."""
        from ...op_slots import ALL_RAN_RECORD  # noqa: PLC0415

        if self._slot_fd >= 0:
            self.graph.lib.wrp_guard_op_slot(None, -1)
            os.pwrite(self._slot_fd, ALL_RAN_RECORD, 0)

    def close(self) -> None:
        self._views = {}
        self.graph.close()
        if self._slot_fd >= 0:
            os.close(self._slot_fd)
            self._slot_fd = -1


def open_loaded(engine: str, wrp_bytes, modules: dict, device: str, *, made_from_valid: bool = False):
    """Load WRP1 bytes with the ``"python"`` (:class:`WarpLoaded`) or ``"native"`` (:class:`NativeLoaded`) engine.

    ``made_from_valid``: see :meth:`WarpLoaded.open` (the C API validates what it opens, always).

    Raises:
        WrpError: An engine of another name (what to use instead), or what the engine's load raised.
    """
    if engine == "python":
        return WarpLoaded.open(wrp_bytes, modules, device, made_from_valid=made_from_valid)
    if engine == "native":
        return NativeLoaded.open(wrp_bytes, modules, device)
    raise WrpError(f"unknown engine {engine!r}", hint="Use 'python' or 'native'.")


__all__ = ["WarpLoaded", "NativeLoaded", "open_loaded", "ENGINE_NAMES"]
