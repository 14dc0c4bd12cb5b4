"""The front door: :func:`load` a capture as a :class:`~wrpkit.run.load.program.Program`, in this
process, or as an :class:`IsolatedProgram` that replays in a child process.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Mapping, Optional

import numpy as np

from ...formats import annotations as ann
from ...errors import WrpBindingError, WrpError


from ..load.prepare import Prepared, check_runnable, coerce_input, prepare, release, unknown_binding
from ..load.program import Program, _serialised, load_prepared


class IsolatedProgram:
    """A validated capture that replays in a child process (see ``load(isolate=True)``).

    Nothing of Warp runs in this process.  The child starts at the first
    :meth:`run`, loads the graph once and stays, so a later run costs a
    request and the bindings' bytes; its memory persists between runs as in a
    :class:`~wrpkit.run.load.program.Program`.  When a run crashes, times out or fails, that child is
    gone and the next run starts a new one from the file's data and the
    bindings as the last successful run left them.  :meth:`close` (or the
    program's garbage collection) ends the child.

    Threads: safe to share, like :class:`~wrpkit.run.load.program.Program`: requests to the child are
    serialised by the program's lock.

    Attributes:
        model: The decoded program.
        device: The device string.
        path: The source file, or None.
        annotations: wrpkit's annotations, or None.
    """

    def __init__(self, prepared: Prepared, device: str):
        self.model = prepared.model
        self.device = device
        self.path = prepared.path
        self.annotations = prepared.annotations
        self._prepared = prepared
        self._sig = dict(prepared.signature)
        self._sizes = dict(prepared.sizes)
        self._state = {}  # {name: uint8 bytes of the binding}; absent: the file's initial data
        self._dirty = set()  # names set since the child last saw them
        self._reset_child = False  # reset() since the child's last run: its unnamed memory too
        self._worker = None  # its ReplayWorker, started by the first run
        self._lock = threading.RLock()
        self._max_memory = None  # load(max_memory=): the child's budget

    signature = Program.signature
    bindings = Program.bindings
    inputs = Program.inputs
    outputs = Program.outputs
    warp_version = Program.warp_version

    def __repr__(self) -> str:
        src = f" {self.path}" if self.path else ""
        return f"<wrpkit.run.replay.runtime.IsolatedProgram{src} on {self.device} bindings={list(self._sizes)}>"

    def _check(self, name):
        if name not in self._sizes:
            raise unknown_binding(name, self._sizes)

    _asked = Program._asked

    @_serialised
    def set(self, name: str, value) -> None:
        """Set one binding for the next run (same rules as ``run``'s inputs)."""
        self._check(name)
        size, sig = self._sizes[name], self._sig.get(name)
        arr = coerce_input(name, value, size, sig)
        if arr.nbytes == size:
            self._state[name] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8).copy()
        else:
            raw = self._state.get(name)
            if raw is None:
                raw = self._initial(name)
            ann.view_region(raw, sig)[...] = arr
            self._state[name] = raw
        self._dirty.add(name)

    def _initial(self, name) -> np.ndarray:
        rid = self.model.binding_map()[name]
        region = self.model.region_map()[rid]
        data = getattr(region, "data", None)
        if data is not None and len(memoryview(data)) == region.size:
            return np.frombuffer(bytes(memoryview(data)), dtype=np.uint8).copy()
        return np.zeros(region.size, dtype=np.uint8)

    @_serialised
    def get(self, name: str) -> np.ndarray:
        """A copy of one binding after the last run, typed per its signature."""
        self._check(name)
        raw = self._state.get(name)
        if raw is None:
            raw = self._initial(name)
        sig = self._sig.get(name)
        return raw.copy() if sig is None else np.array(ann.view_region(raw, sig), copy=True)

    numpy = get

    @_serialised
    def reset(self) -> None:
        """Restore all of the graph's memory to the bytes it held when it was captured (as :meth:`Program.reset`).

        The bindings are restored here; the memory no binding names is restored in the child at
        the next run.
        """
        self._state = {name: self._initial(name) for name in self._sizes}
        self._dirty = set(self._sizes)  # the child's memory still holds the last run's bytes
        self._reset_child = True

    @_serialised
    def run(self, inputs: Optional[Mapping] = None, repeat: int = 1, *, outputs=None, copy: bool = True,
            isolate: bool = True, timeout: Optional[float] = None, reset: bool = False) -> dict:
        """Set inputs, replay ``repeat`` times in a child process, and return the outputs.

        Every binding comes back from the child (through shared memory: a new
        child after a crash starts from them); only ``outputs`` are returned.
        What the kernels print (``wp.printf``) is forwarded to ``sys.stdout``, all
        of it before this returns, as an in-process run prints it to stdout.

        Args:
            inputs: As for :meth:`Program.run`.
            repeat: Number of replays.
            outputs: As for :meth:`Program.run` (None: the signature's outputs).
            copy: False: views of this program's copy of the bindings (valid until the next run).
            isolate: Must be True (an isolated program has no graph in this process).
            timeout: Seconds for the child (None: no limit).
            reset: True: :meth:`reset` before the inputs are set, atomically with the run.

        Raises:
            WrpBindingError: An unknown name, a size or dtype mismatch.
            WrpCrashError: The replay died of a fatal signal; nothing changed here.
            WrpTimeoutError: ``timeout`` ran out.
            WrpRuntimeError: Warp failed to load or replay it.
        """
        from ..contain.isolation import replay_in_worker  # noqa: PLC0415
        from ..contain.worker import ReplayWorker  # noqa: PLC0415

        names = self._asked(outputs)
        if not isolate:
            raise WrpError("this program was loaded with isolate=True; load it again without to run in-process")
        before, dirty, reset_child = dict(self._state), set(self._dirty), self._reset_child
        if reset:
            self.reset()
        if inputs:
            if not isinstance(inputs, Mapping):
                raise WrpBindingError(f"inputs must be a mapping of binding name to array, got "
                                      f"{type(inputs).__name__}")
            try:
                for n, v in inputs.items():
                    self.set(n, v)
            except WrpError:
                self._state, self._dirty, self._reset_child = before, dirty, reset_child
                raise
        repeat = int(repeat)
        if repeat < 0:
            raise WrpError(f"repeat must be >= 0, got {repeat}")
        if self._worker is None:
            self._worker = ReplayWorker(self._prepared, self.device, max_memory=self._max_memory)
            weakref.finalize(self, self._worker.close)
        # A new child starts from the file's data: it gets every binding this program holds.
        send = self._state if not self._worker.alive else {n: self._state[n] for n in self._dirty}
        try:
            # Every binding comes back (in shared memory): a new child after a crash starts from them.
            # The kernels' own output (wp.printf) goes to sys.stdout, as an in-process run's goes to the
            # process's stdout.
            run = replay_in_worker(self._worker, send, repeat, timeout=timeout, full_state=self._state,
                                   reset=self._reset_child, kernel_output="stdout")
        except BaseException:
            # A failed run changes nothing here (its child is gone, and the next one starts fresh).
            self._state, self._dirty, self._reset_child = before, dirty, reset_child
            raise
        self._dirty.clear()
        self._reset_child = False
        self._state = dict(run.results)
        if copy:
            return {name: self.get(name) for name in names}
        return {name: (self._state[name] if self._sig.get(name) is None else
                       ann.view_region(self._state[name], self._sig[name])) for name in names}

    @_serialised
    def close(self) -> None:
        """End the replay child and release the source mapping."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        release(self._prepared)


def load(path_or_bytes, device="cpu", modules: Optional[Mapping] = None, *, isolate: bool = False,
         allow_raw_pointers: bool = False, modules_dir=None, max_memory=None, trusted_keys=None,
         signature=None):
    """Load a ``.wrp`` or ``.wrpk`` (path or bytes) as a runnable :class:`~wrpkit.run.load.program.Program`.

    Checks, in order: the container decodes and validates with wrpkit's codec;
    the module files are present, non-empty and match their recorded
    digests; the device family matches; the Warp version matches.  Then Warp
    loads it.

    Args:
        path_or_bytes: A path, or the bytes of a ``.wrp`` / ``.wrpk``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``wp.Device``.
        modules: ``{filename: bytes}`` of module files (needed for the bytes
            of a ``.wrp`` that launches kernels; replaces ``<stem>_modules/``
            for a path).
        isolate: Return an :class:`IsolatedProgram`, which validates here
            and replays in a child process that its first run starts and
            loads: a crash in kernel code or in Warp's runtime raises
            :class:`~wrpkit.errors.WrpCrashError` (a ``WrpRuntimeError``)
            instead of ending the caller.  The first run costs a process
            start and a load; later runs a request and the bindings' bytes.
        allow_raw_pointers: Accept kernel arguments holding live process
            pointers (refused by default: see :func:`~wrpkit.run.load.prepare.prepare`).
        modules_dir: For a ``.wrp`` path: the folder of its module files
            (default: ``<stem>_modules/`` beside the path, or beside a
            symbolic link's target).
        max_memory: Bytes (or a size such as ``"64G"``) the load may
            allocate, replacing the check against the device's free memory
            (host: available memory; CUDA: free device memory) that runs
            before anything is allocated.
        trusted_keys: Paths of PEM public keys or CA certificates (or folders of ``*.pem``): the
            capture must be signed by one of them (``wrp sign``, or ``model_signing sign``), its
            file and module files unchanged since, checked before anything is decoded or loaded.
            None: what the environment variable ``WRPKIT_TRUSTED_KEYS`` requires (nothing when
            it is unset).
        signature: The signature file, when it is not ``STEM.sig`` beside the capture.

    A path may be a symbolic link, or a stem to which ``.wrp`` is added (as
    ``wp.capture_load`` does).

    Raises:
        WrpFormatError, WrpValidationError: The file is invalid, or holds raw
            process pointers.
        WrpModuleError: A module file is missing, empty or altered.
        WrpDeviceError: Wrong device family, or the device is unavailable.
        WrpVersionError: Recorded with another Warp version (recapture needed).
        WrpRuntimeError: Warp failed to load it.
        WrpOutOfMemoryError: Its memory does not fit the device (or ``max_memory``), or an allocation failed.
        WrpSignatureError: Unsigned, signed by no trusted key, or changed after signing (exit 3).
    """
    from ...checks.memory import parse_size  # noqa: PLC0415
    from ...formats.signature import ENVIRONMENT, Trust  # noqa: PLC0415

    max_memory = parse_size(max_memory) if max_memory is not None else None
    paths = [trusted_keys] if isinstance(trusted_keys, (str, os.PathLike)) else list(trusted_keys or [])
    trust = (Trust.from_paths([p for p in paths if not os.path.isdir(p)], [p for p in paths if os.path.isdir(p)],
                              signature) if paths else Trust.resolve(signature=signature) if signature else ENVIRONMENT)
    prep = prepare(path_or_bytes, modules, allow_raw_pointers=allow_raw_pointers, modules_dir=modules_dir,
                   trust=trust)
    if isolate:
        check_runnable(prep.model, device, what=str(prep.path) if prep.path is not None else "the capture")
        if prep.path is None and prep.kind in ("wrp", "wrpk"):
            prep.source_buffer = bytes(memoryview(prep.source_buffer).cast("B"))  # the caller's buffer may change
            if prep.kind == "wrp":
                prep.wrp_bytes = prep.source_buffer
        iso = IsolatedProgram(prep, str(device))
        iso._max_memory = max_memory
        return iso
    prog = load_prepared(prep, device, max_memory)
    if prep.kind == "wrpk":
        prep.wrp_bytes = None  # Warp copied what it needs; the rebuilt image is no longer used
    return prog


__all__ = ["load", "IsolatedProgram"]
