"""Where the graph of a :class:`~wrpkit.run.load.program.Program` loaded with ``isolate=True`` lives:
a replay child, which its first run starts and which stays between runs, and this process's copy of
every binding the child last gave back.

A run sends the child the bindings set here since its last run (a new child, which starts from the
file's data: every binding set here) and takes every binding back through shared memory.  A run that
crashes, times out or fails ends that child and changes nothing here; the next run starts a new one.
"""

from __future__ import annotations

import weakref
from typing import Optional

import numpy as np

from ...deadline import Deadline
from .prepare import Prepared, captured_bytes


class ChildGraph:
    """A Program's graph in a replay child, and this process's copy of its bindings.

    Args:
        prepared: The validated capture (the child maps its source itself).
        device: The device string.
        max_memory: Bytes the child's load may allocate (``load(max_memory=)``), or None.
    """

    def __init__(self, prepared: Prepared, device: str, max_memory: Optional[int]):
        self._prepared = prepared
        self._device = device
        self._max_memory = max_memory
        self._worker = None  # its ReplayWorker, started by the first run
        self.state = {}  # {name: uint8 bytes of the binding}; absent: the file's initial data
        self._dirty = set()  # names set since the child last saw them
        self._reset = False  # reset() since the child's last run: its unnamed memory too

    def initial(self, name: str) -> np.ndarray:
        """The bytes binding ``name`` held when it was captured (zeros where the file has none)."""
        model = self._prepared.model
        return captured_bytes(model.region_map()[model.binding_map()[name]]).copy()

    def read(self, name: str) -> np.ndarray:
        """A copy of a binding's bytes as the last run (or a write here) left them."""
        raw = self.state.get(name)
        return raw.copy() if raw is not None else self.initial(name)

    def write(self, name: str, host) -> None:
        """Set a binding's whole bytes for the next run (copied)."""
        self.state[name] = np.array(host, dtype=np.uint8, copy=True).reshape(-1)
        self._dirty.add(name)

    def reset(self, names) -> None:
        """The captured bytes for every binding here, and for all of the child's memory at its next run."""
        self.state = {}
        self._dirty = set(names)  # the child's memory still holds the last run's bytes
        self._reset = True

    def saved(self) -> tuple:
        """What :meth:`restore` puts back (taken before a run's inputs are set)."""
        return dict(self.state), set(self._dirty), self._reset

    def restore(self, saved: tuple) -> None:
        self.state, self._dirty, self._reset = saved

    def replay(self, repeat: int, timeout: Optional[float], before: tuple) -> None:
        """Replay ``repeat`` times in the child and take every binding back; on any failure put back
        ``before`` (:meth:`saved`) and raise.

        Raises:
            WrpCrashError: The replay died of a fatal signal (the op named).
            WrpTimeoutError: ``timeout`` ran out.
            WrpRuntimeError: Warp failed to load or replay it.
        """
        from ..contain.isolation import replay_in_worker  # noqa: PLC0415
        from ..contain.worker import ReplayWorker  # noqa: PLC0415

        if self._worker is None:
            self._worker = ReplayWorker(self._prepared, self._device, max_memory=self._max_memory)
            weakref.finalize(self, self._worker.close)
        state = self.state
        send = dict(state) if not self._worker.alive else \
            {n: state[n] if n in state else self.initial(n) for n in self._dirty}
        try:
            # The kernels' own output (wp.printf) goes to sys.stdout, as an in-process run's goes to the
            # process's stdout.
            run = replay_in_worker(self._worker, send, repeat, deadline=Deadline.after(timeout, repeat),
                                   full_state=dict(state), reset=self._reset, kernel_output="stdout")
        except BaseException:
            self.restore(before)  # its child is gone, and the next run starts a new one
            raise
        self._dirty.clear()
        self._reset = False
        self.state = dict(run.results)

    def close(self) -> None:
        """End the child (a later run starts a new one)."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None
