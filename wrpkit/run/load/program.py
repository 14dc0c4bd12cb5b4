"""Load a captured program and run it through Warp.

:func:`wrpkit.run.replay.runtime.load` decodes and validates a ``.wrp`` or ``.wrpk`` with wrpkit's own
codec before any byte reaches Warp, checks that it can run here (device
family, Warp version, module files present, unaltered and non-empty), then
loads it with ``wp.capture_load_from_bytes`` (so only the named modules load
and ``.wrpk`` bundles need no temporary files).  The result is a
:class:`Program`: a runnable graph with typed bindings.

Example::

    prog = wrpkit.load("saxpy.wrp", device="cpu")
    out = prog.run({"x": x, "y": y}, repeat=10)   # {name: np.ndarray}
    y = prog.numpy("y")                           # zero-copy view on CPU

All checks and all per-binding bookkeeping (pointers, numpy views) happen
once, at load; :meth:`Program.run` adds nothing per launch to
``wp.capture_launch``.

Loading into Warp (devices, memory checks, hidden bindings) is
:mod:`wrpkit.run.load.program_load`'s; this module is the loaded :class:`Program`
and its pickling.
"""



from __future__ import annotations

import threading
from typing import Mapping, Optional

import numpy as np

from ...formats import annotations as ann
from ...environment import warp_replay_error
from ...errors import WrpBindingError, WrpError, WrpRuntimeError
from ..warp_bridge.dtypes import warp_dtype


from ...deadline import Deadline
from .child_graph import ChildGraph
from .prepare import Prepared, captured_bytes, check_runnable, coerce_input, prepare, release, unknown_binding, writes_whole_region
from .program_load import load_graph

def _serialised(method):
    """Run ``method`` holding its program's lock (see :class:`Program`, "Threads")."""
    import functools  # noqa: PLC0415

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class _HostMemory:
    """Exposes ``size`` bytes at ``ptr`` to numpy while keeping ``owner`` (the graph) alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, ptr: int, size: int, owner):
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3}
        self.owner = owner


class _Slot:
    __slots__ = ("name", "size", "ptr", "sig", "region", "view")

    def __init__(self, name, size, ptr, sig):
        self.name, self.size, self.ptr, self.sig = name, size, ptr, sig
        self.region = None  # CPU: uint8 view of the region
        self.view = None  # CPU: typed view per the signature


class Program:
    """A loaded, runnable captured program.

    Its graph lives in this process (Warp's ``wp.Graph``), or, loaded with
    ``isolate=True``, in a child process that its first :meth:`run` starts
    and loads (:attr:`isolated`).  Nothing of Warp runs in this process then:
    a crash in kernel code or in Warp's runtime raises
    :class:`~wrpkit.errors.WrpCrashError` instead of ending the caller.  The
    child stays, so a later run costs a request and the bindings' bytes; this
    process holds a copy of the bindings, which each run sends (those set
    since) and takes back.  When a run crashes, times out or fails, that child
    is gone and the next run starts a new one from the file's data and the
    bindings as the last successful run left them.  What only a graph in this
    process has (:meth:`launch`, :meth:`array`, live views,
    :meth:`release_captured`) raises :class:`~wrpkit.errors.WrpError` there.

    Threads: a Program is safe to share between threads.  Every call that
    touches its graph or bindings (``run``, ``launch``, ``set``, ``get``,
    ``numpy``, ``array``, ``reset``, ``close``) holds the program's lock, so
    runs on one Program are serialised: each ``run`` sets its inputs, replays
    and reads its outputs back before another thread's ``run`` starts (two
    threads get two programs' worth of throughput only from two Programs).
    The lock costs about a microsecond per call uncontended; a waiting thread
    waits for the runs ahead of it.  Views (``numpy()`` on CPU, ``array()``,
    ``run(copy=False)``) alias the graph's memory, which a later replay
    changes: read them before another thread runs, or take copies.

    Attributes:
        model: The decoded program (:class:`wrpkit.model.Program`).
        graph: Warp's loaded ``wp.Graph`` (None when :attr:`isolated`).
        device: The ``wp.Device`` it runs on (its name, a string, when :attr:`isolated`).
        path: The source file, or None.
        annotations: wrpkit's annotations, or None.
    """

    def __init__(self, prepared: Prepared, graph, device, hidden: Optional[Mapping] = None, *,
                 child: Optional[ChildGraph] = None):
        self.model = prepared.model
        self.graph = graph
        self.device = device
        self.path = prepared.path
        self.annotations = prepared.annotations
        self._prepared = prepared
        self._closed = False
        self._captured_released = False  # release_captured(): reset, pickling and isolated runs refuse
        self._bundle = None
        self._lock = threading.RLock()
        self._sig = dict(prepared.signature)
        self._sizes = dict(prepared.sizes)
        self._child = child
        if child is not None:  # the bindings' bytes are this process's copy (_read_raw, _write_raw)
            self._is_cpu = False
            self._slots = {name: _Slot(name, size, 0, self._sig.get(name)) for name, size in self._sizes.items()}
            self._hidden = {}
            return
        self._is_cpu = bool(device.is_cpu)
        self._slots = {name: self._graph_slot(name, size, self._sig.get(name), f"binding {name!r}")
                       for name, size in self._sizes.items()}
        # Regions no binding names, reachable under the names load_graph gave them in the image
        # Warp loaded (program_load.HIDDEN_BINDING), so that reset() restores them too: {region_id: _Slot}.
        regions = self.model.region_map()
        self._hidden = {region_id: self._graph_slot(name, int(regions[region_id].size), None, f"region {region_id}")
                        for name, region_id in (hidden or {}).items()}

    def _graph_slot(self, name: str, size: int, sig, what: str) -> _Slot:
        """The :class:`_Slot` of the graph's memory that Warp knows as binding ``name`` (``what`` names it
        in the error when Warp has none)."""
        ptr = self.graph.get_param_ptr(name)
        if not ptr and size:
            raise WrpRuntimeError(f"Warp has no memory for {what}")
        slot = _Slot(name, size, int(ptr or 0), sig)
        if self._is_cpu:
            # The views own the graph (which owns the memory), not this Program:
            # no reference cycle, and a view outliving the Program stays valid.
            slot.region = (np.asarray(_HostMemory(slot.ptr, size, self.graph)) if size
                           else np.zeros(0, dtype=np.uint8))
            slot.view = ann.view_region(slot.region, slot.sig) if slot.sig is not None else slot.region
        return slot

    # -- description ----------------------------------------------------------

    @property
    def signature(self) -> dict:
        """``{binding name: ArraySignature or None}`` (None: no typed signature recorded)."""
        return dict(self._sig)

    @property
    def bindings(self) -> dict:
        """``{binding name: size in bytes}``."""
        return dict(self._sizes)

    @property
    def inputs(self) -> list:
        """Names recorded as inputs (every binding when the file has no signature)."""
        return [n for n in self._sizes if self._sig.get(n) is None or self._sig[n].is_input]

    @property
    def outputs(self) -> list:
        """Names recorded as outputs (every binding when the file has no signature)."""
        return [n for n in self._sizes if self._sig.get(n) is None or self._sig[n].is_output]

    @property
    def warp_version(self) -> str:
        return self.model.warp_version

    @property
    def isolated(self) -> bool:
        """True when the graph lives in a child process (``load(isolate=True)``)."""
        return self._child is not None

    def __repr__(self) -> str:
        src = f" {self.path}" if self.path else ""
        where = " in a child process" if self._child is not None else ""
        return f"<wrpkit.Program{src} on {self.device}{where} bindings={list(self._sizes)}>"

    def _check_here(self, what: str) -> None:
        """Refuse ``what`` on an isolated program: it needs the graph in this process."""
        if self._child is not None:
            raise WrpError(f"{what} needs the graph in this process, and this program replays in a child "
                           f"process (loaded with isolate=True)",
                           hint="Use run(), get() and set(); or load it without isolate=True.")

    def _slot(self, name: str) -> _Slot:
        self._check_open()
        try:
            return self._slots[name]
        except (KeyError, TypeError):
            raise unknown_binding(name, self._slots) from None

    # -- running --------------------------------------------------------------

    @_serialised
    def launch(self) -> None:
        """Replay the graph once (``wp.capture_launch``); asynchronous on CUDA."""
        self._check_open()
        self._check_here("launch()")
        import warp as wp  # noqa: PLC0415

        wp.capture_launch(self.graph)

    @_serialised
    def reset(self) -> None:
        """Restore all of the graph's memory to the bytes it held when the graph was captured.

        After ``reset()``, a replay with the same inputs gives what the first
        replay after :func:`~wrpkit.run.replay.runtime.load` gave: every binding and
        every region no binding names (scratch buffers, a ``capture_while``
        flag that the last replay left at 0) is restored.  It copies every
        region's bytes (about a ``memcpy`` of the capture's data).

        Raises:
            WrpError: The program is closed.
            WrpRuntimeError: Warp failed to write a binding.
        """
        self._check_open()
        self._check_captured("reset()")
        if self._child is not None:  # the memory no binding names is restored in the child at the next run
            self._child.reset(self._sizes)
            return
        regions = self.model.region_map()
        targets = [(self._slots.get(b.name), b.region_id) for b in self.model.resolved_bindings()]
        targets += [(slot, region_id) for region_id, slot in self._hidden.items()]
        for slot, region_id in targets:
            if slot is None:
                continue
            self._write_raw(slot, captured_bytes(regions[region_id]))

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            src = f" ({self.path})" if self.path else ""
            raise WrpError(f"this Program{src} is closed: its graph and memory were released by close()",
                           hint="Load it again with wrpkit.load(...), or close it only when done with it.")

    def _check_captured(self, what: str) -> None:
        if self._captured_released:
            raise WrpError(f"{what} needs the captured data, which this Program let go of (release_captured())",
                           hint="Load the capture again with wrpkit.load(...).")

    @_serialised
    def release_captured(self) -> None:
        """Let go of the bytes the program was loaded from; Warp keeps its own copy of the graph's memory.

        A program loaded from bytes in memory holds them for :meth:`reset`,
        pickling and ``run(isolate=True)``, which start from the captured data:
        for a large capture that is a second copy of it (one loaded from a file
        holds only the file's mapping, which costs no memory).  After this call
        those three raise :class:`~wrpkit.errors.WrpError`; everything else works.
        """
        self._check_open()
        self._check_here("release_captured()")  # a new child after a crash starts from the captured data
        if self._captured_released:
            return
        from ... import records  # noqa: PLC0415

        self._captured_released = True
        self.model = records.replace(self.model, regions=[records.replace(r, data=None)
                                                          for r in self.model.regions])
        _detach_views(self.model)
        # The source's bytes go (a file's mapping stays: it is the file's pages, and close() closes it).
        self._prepared = records.replace(self._prepared, model=self.model, source_buffer=None, wrp_bytes=None,
                                         deferred=[], _keep=[k for k in self._prepared._keep
                                                                 if hasattr(k, "close")])

    def __reduce__(self):
        """Pickle as the program's ``.wrpk`` bundle bytes plus its device.

        A worker process (``multiprocessing``, ``concurrent.futures``, Ray,
        Dask) unpickles it by loading the bundle from memory: the captured
        program, not the current contents of its bindings, travels.
        """
        self._check_open()
        self._check_captured("pickling")
        return (_program_from_bundle, (self.bundle_bytes(), str(self.device), self.isolated))

    def bundle_bytes(self) -> bytes:
        """The program as ``.wrpk`` bundle bytes (module binaries inside), made once and kept."""
        self._check_open()
        if self._bundle is None:
            from ...formats.wrpk import builder  # noqa: PLC0415

            self._bundle = builder.encode_wrpk(self.model, self._prepared.modules)
        return self._bundle

    @_serialised
    def run(self, inputs: Optional[Mapping] = None, repeat: int = 1, *, outputs=None, copy: bool = True,
            isolate: Optional[bool] = None, timeout: Optional[float] = None, reset: bool = False) -> dict:
        """Set inputs, replay ``repeat`` times, and read the outputs back.

        Only what is asked for is read back: by default the outputs of the
        signature (every binding when the file records none), or the bindings
        named in ``outputs``.  With ``copy=False`` the results are read in
        place: on CPU, numpy views of the graph's memory (no copy at all; the
        next replay changes them, and they keep the memory alive); on CUDA,
        ``wp.array`` views of the device memory (:meth:`array`).

        An :attr:`isolated` program replays in its child (see the class).
        A program in this process replays there, or, with ``isolate=True``, in
        a child process started for this call from its current bindings,
        whose results are written back here.  Either way a fatal signal in
        kernel code or in Warp's runtime then raises
        :class:`~wrpkit.errors.WrpCrashError` (a ``WrpRuntimeError``) naming
        the op that crashed, instead of ending this process, and ``timeout``
        (seconds) bounds the child.  A child for one call costs a process
        start and a load (see the README's benchmarks).

        What the kernels print (``wp.printf``) goes where Warp prints it, this
        process's stdout (C stdio: it may show only at exit when stdout is not
        a terminal); an isolated run's child forwards its own to ``sys.stdout``.

        Runs on one Program from several threads are serialised (see the
        class's "Threads").  A run starts from the bindings the previous run
        left; ``reset=True`` restores the captured bindings first, under the
        same lock, so that tasks sharing one Program (a Dask ``scatter``, a
        Ray actor) each run from the captured state.

        Args:
            inputs: ``{name: array}`` (numpy arrays, ``wp.array`` or
                bytes-like).  With a recorded signature each must have exactly
                its numpy shape and dtype (a view binding takes the view's
                shape); without one, exactly the binding's bytes.
            repeat: Number of replays (0 only sets inputs and reads back).
            outputs: Names of the bindings to return (None: :attr:`outputs`;
                ``"*"``: every binding; ``[]``: none, the fastest run).
            copy: False: return views of the graph's memory instead of copies
                (of this process's copy of the bindings, valid until the next
                run, when :attr:`isolated`).
            isolate: None: where the program lives; True: in a child process;
                False on an :attr:`isolated` program is refused.
            timeout: Seconds a child may take (None: no limit).
            reset: True: :meth:`reset` before the inputs are set, atomically
                with the run.

        Returns:
            ``{name: np.ndarray}`` per name asked for, typed and shaped per its
            signature, or raw ``uint8`` bytes when it has none.

        Raises:
            WrpBindingError: An unknown name, a shape, size or dtype mismatch.
            WrpRuntimeError: Warp failed to replay (:class:`~wrpkit.errors.WrpCrashError`
                when an isolated replay crashed).
            WrpTimeoutError: An isolated replay ran past ``timeout``.
            WrpError: The program is closed.
        """
        self._check_open()
        names = self._asked(outputs)
        # Checked before anything changes, on every route.
        if inputs and not isinstance(inputs, Mapping):
            raise WrpBindingError(f"inputs must be a mapping of binding name to array, got {type(inputs).__name__}")
        repeat = int(repeat)
        if repeat < 0:
            raise WrpError(f"repeat must be >= 0, got {repeat}")
        if self._child is not None:
            if isolate is False:
                raise WrpError("this program was loaded with isolate=True; load it again without to run "
                               "in-process")
            self._run_in_child(inputs, repeat, timeout, reset)
            return self._results(names, copy)
        import warp as wp  # noqa: PLC0415

        if reset:
            self.reset()
        if isolate:
            self._run_isolated(inputs, repeat, timeout)
            return self._results(names, copy)
        if inputs:
            checked = [(self._slot(n), self._as_input(n, v)) for n, v in inputs.items()]
            for slot, arr in checked:
                self._write(slot, arr)
        graph, launch = self.graph, wp.capture_launch
        try:
            for _ in range(repeat):
                launch(graph)
        except RuntimeError as e:
            raise warp_replay_error(str(e)) from None
        if not self._is_cpu:
            wp.synchronize_device(self.device)
        return self._results(names, copy)

    def _asked(self, outputs) -> list:
        """The binding names ``run(outputs=...)`` returns, checked."""
        if outputs is None:
            return self.outputs
        if outputs == "*":
            return list(self._sizes)
        if isinstance(outputs, str):
            outputs = [outputs]
        names = list(outputs)
        for n in names:
            if n not in self._sizes:
                raise unknown_binding(n, self._sizes)
        return names

    def _results(self, names: list, copy: bool) -> dict:
        if copy:
            return {name: self.get(name) for name in names}
        if self._child is not None:
            state = self._child.state
            return {name: state[name] if self._sig.get(name) is None else ann.view_region(state[name], self._sig[name])
                    for name in names}
        if self._is_cpu:
            return {name: self._slots[name].view for name in names}
        return {name: self.array(name) for name in names}

    def _run_in_child(self, inputs, repeat, timeout, reset) -> None:
        """``run()`` of an :attr:`isolated` program: a failed run changes nothing here."""
        child = self._child
        before = child.saved()
        try:
            if reset:
                self.reset()
            for n, v in (inputs or {}).items():
                self.set(n, v)
        except WrpError:
            child.restore(before)
            raise
        child.replay(repeat, timeout, before)

    def _run_isolated(self, inputs, repeat, timeout) -> dict:
        from ..contain.isolation import replay_in_child  # noqa: PLC0415

        state = {name: self._read_raw(slot) for name, slot in self._slots.items()}
        if inputs:
            for n, v in inputs.items():
                slot = self._slot(n)
                arr = self._as_input(n, v)
                if arr.nbytes == slot.size:
                    state[n] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
                else:  # a view binding: write through the signature
                    ann.view_region(state[n], slot.sig)[...] = arr
        # The kernels' own output (wp.printf) goes to sys.stdout, as an in-process run's goes to stdout.
        run = replay_in_child(self._prepared, str(self.device), state, repeat,
                              deadline=Deadline.after(timeout, repeat), raw=True, kernel_output="stdout")
        for name, slot in self._slots.items():
            self._write_raw(slot, run.results[name])

    # -- bindings ---------------------------------------------------------------

    def _as_input(self, name: str, value) -> np.ndarray:
        slot = self._slot(name)
        return coerce_input(name, value, slot.size, slot.sig)

    def _write(self, slot: _Slot, arr: np.ndarray) -> None:
        whole = writes_whole_region(slot.sig, arr.nbytes, slot.size)
        if self._is_cpu:
            if whole:
                if slot.size:
                    slot.region[:] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            else:
                slot.view[...] = arr
            return
        if whole:
            host = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        else:
            host = self._read_raw(slot)
            ann.view_region(host, slot.sig)[...] = arr
        self._write_raw(slot, host)

    def _write_raw(self, slot: _Slot, host: np.ndarray) -> None:
        """Write ``slot.size`` bytes over the binding's whole region."""
        if self._child is not None:
            self._child.write(slot.name, host)
            return
        if self._is_cpu:
            if slot.size:
                slot.region[:] = host
            return
        import warp as wp  # noqa: PLC0415

        if slot.size:
            tmp = wp.array(host, dtype=wp.uint8, device=self.device)
            try:
                self.graph.set_param(slot.name, tmp)
            except RuntimeError as e:
                raise WrpRuntimeError(f"cannot set binding {slot.name!r}: {e}") from None

    def _read_raw(self, slot: _Slot) -> np.ndarray:
        if self._child is not None:
            return self._child.read(slot.name)
        if self._is_cpu:
            return slot.region.copy()
        import warp as wp  # noqa: PLC0415

        if not slot.size:
            return np.zeros(0, dtype=np.uint8)
        tmp = wp.empty(slot.size, dtype=wp.uint8, device=self.device)
        try:
            self.graph.get_param(slot.name, tmp)
        except RuntimeError as e:
            raise WrpRuntimeError(f"cannot read binding {slot.name!r}: {e}") from None
        return tmp.numpy()

    # -- whole regions as bytes (what a contained replay's child moves through shared memory) --

    @_serialised
    def write_bytes(self, name: str, data) -> None:
        """Write a binding's whole region from raw bytes, with no typing or conversion.

        Args:
            name: The binding.
            data: ``uint8`` array of exactly the binding's size in bytes.

        Raises:
            WrpBindingError: Unknown binding, or ``data`` is not the binding's size.
            WrpError: The program is closed.
            WrpRuntimeError: Warp refused the write.
        """
        slot = self._slot(name)
        host = np.asarray(data, dtype=np.uint8).reshape(-1)
        if host.size != slot.size:
            raise WrpBindingError(f"binding {name!r} holds {slot.size} bytes, not {host.size}",
                                  hint="Pass the binding's whole region as uint8 bytes.")
        self._write_raw(slot, host)

    @_serialised
    def read_bytes(self, name: str) -> np.ndarray:
        """A copy of a binding's whole region as ``uint8`` bytes.

        Raises:
            WrpBindingError: Unknown binding.
            WrpError: The program is closed.
            WrpRuntimeError: Warp refused the read.
        """
        return self._read_raw(self._slot(name))

    @_serialised
    def region_bytes(self, name: str) -> np.ndarray:
        """A binding's whole region as ``uint8`` bytes, without a copy where there can be none.

        Returns:
            On CPU, a live view of Warp's memory (it changes with every replay
            and is valid only while the program is open); on CUDA, a copy read
            from the device, as :meth:`read_bytes`.

        Raises:
            WrpBindingError: Unknown binding.
            WrpError: The program is closed.
            WrpRuntimeError: Warp refused the read.
        """
        slot = self._slot(name)
        return slot.region if self._is_cpu else self._read_raw(slot)

    @_serialised
    def set(self, name: str, value) -> None:
        """Write one binding (same rules as ``run``'s inputs)."""
        slot = self._slot(name)
        self._write(slot, self._as_input(name, value))

    @_serialised
    def get(self, name: str) -> np.ndarray:
        """A copy of one binding, typed per its signature (raw ``uint8`` without one)."""
        slot = self._slot(name)
        if self._is_cpu:
            return np.array(slot.view, copy=True)
        raw = self._read_raw(slot)
        if slot.sig is None:
            return raw
        return np.array(ann.view_region(raw, slot.sig), copy=True)

    @_serialised
    def numpy(self, name: str) -> np.ndarray:
        """One binding as a numpy array: a zero-copy view on CPU, a copy on CUDA and when :attr:`isolated`.

        The CPU view aliases the graph's memory: replays change it, writes to
        it are inputs.  It keeps the graph's memory alive.
        """
        slot = self._slot(name)
        if self._is_cpu:
            return slot.view
        return self.get(name)

    @_serialised
    def array(self, name: str):
        """One binding as a zero-copy ``wp.array`` over the graph's memory.

        Typed and shaped per the signature; structs and untyped bindings come
        back as ``uint8`` (structs with a trailing dim of the struct size).
        """
        slot = self._slot(name)
        self._check_here("array()")
        import warp as wp  # noqa: PLC0415

        sig = slot.sig
        if not slot.size:
            return wp.empty(0, dtype=wp.uint8, device=self.device)
        if sig is None:
            arr = wp.array(ptr=slot.ptr, dtype=wp.uint8, shape=(slot.size,), capacity=slot.size,
                           device=self.device)
        else:
            wdt = warp_dtype(sig.dtype)
            ptr = slot.ptr + int(sig.byte_offset)
            cap = slot.size - int(sig.byte_offset)
            if wdt is None:
                shape = tuple(sig.shape) + (int(sig.dtype.size),)
                strides = tuple(sig.strides) + (1,)
                arr = wp.array(ptr=ptr, dtype=wp.uint8, shape=shape, strides=strides, capacity=cap,
                               device=self.device)
            else:
                arr = wp.array(ptr=ptr, dtype=wdt, shape=tuple(sig.shape), strides=tuple(sig.strides),
                               capacity=cap, device=self.device)
        arr._wrpkit_owner = self.graph  # the graph owns the memory
        return arr

    @_serialised
    def close(self) -> None:
        """Release the graph and the source mapping (views become invalid).

        Later calls other than ``close`` raise an error saying the program is closed.  An
        :attr:`isolated` program's child ends.
        """
        if self._child is not None:
            self._child.close()
        self._closed = True
        self._slots = {}
        self.graph = None
        release(self._prepared)


#: Programs unpickled in this process: {(bundle header, size, device): [Program, ...]}.
_unpickled: dict = {}
_unpickled_lock = threading.Lock()
#: Graphs kept per bundle and device (one per task that held one at the same time).
_UNPICKLED_PER_BUNDLE = 8


def _detach_views(model) -> None:
    """Replace every ``memoryview`` the model's records hold (a launch's argument bytes, names) by
    ``bytes`` of its own: a view of a few bytes keeps the whole buffer it was decoded from alive."""
    from ... import records  # noqa: PLC0415

    stack = [model]
    while stack:
        obj = stack.pop()
        if isinstance(obj, (list, tuple)):
            stack.extend(obj)
            continue
        if not records.is_record(obj) or isinstance(obj, type):
            continue
        for f in records.fields(obj):
            value = getattr(obj, f.name, None)
            if isinstance(value, memoryview):
                object.__setattr__(obj, f.name, bytes(value))
            elif isinstance(value, (list, tuple)) or records.is_record(value):
                stack.append(value)


def _reusable(prog: Program) -> bool:
    """Whether :meth:`Program.reset` restores all of ``prog``'s state: every region is bound or was
    given a hidden name at load (a CUDA ``.wrp`` loaded by ``wp.capture_load`` has none)."""
    reached = {b.region_id for b in prog.model.resolved_bindings()} | set(prog._hidden)
    return all(r.region_id in reached for r in prog.model.regions)


def _program_from_bundle(bundle: bytes, device: str, isolated: bool = False) -> Program:
    """Unpickle a :class:`Program`: load its bundle bytes from memory on ``device`` (``isolated``: as a
    program that replays in a child process, which its first run starts).

    A worker that unpickles the same bundle again (Ray and Dask ship a task's
    arguments with every task) gets a graph it loaded before, reset to its
    captured values, instead of a second load (unpickling is a full load) --
    but only a graph nobody holds any more: a Program is never handed to two
    holders at once, so tasks running side by side (threads) each have their
    own graph, whichever thread unpickled their arguments.  Only graphs whose
    every region :meth:`Program.reset` reaches are reused (all of them, but for
    a CUDA ``.wrp`` Warp loaded itself); others load afresh.  Warp's banner is off.
    """
    import sys  # noqa: PLC0415

    if isolated:
        return load_isolated(prepare(bundle), device)
    view = memoryview(bundle).cast("B")
    # The header holds the manifest's SHA-256, which covers every blob's: it names the content.
    key = (bytes(view[:128]), view.nbytes, str(device))
    with _unpickled_lock:
        pool = _unpickled.setdefault(key, [])
        pool[:] = [p for p in pool if not p.closed]
        for prog in pool:
            # Held by the pool, this loop and getrefcount's argument only: nobody uses it now.
            if sys.getrefcount(prog) <= 3:
                prog.reset()
                return prog
    prep = prepare(bundle)
    prog = load_prepared(prep, device)  # starts Warp quietly (resolve_device)
    if prep.kind == "wrpk":
        prep.wrp_bytes = None  # as load() does: Warp copied what it needs
    if _reusable(prog):
        with _unpickled_lock:
            pool = _unpickled.setdefault(key, [])
            if len(pool) < _UNPICKLED_PER_BUNDLE:
                pool.append(prog)
    return prog


def load_prepared(prep: Prepared, device="cpu", max_memory: Optional[int] = None) -> Program:
    """Load a :class:`Prepared` capture into Warp (see :func:`wrpkit.run.replay.runtime.load`;
    :func:`~wrpkit.run.load.program_load.load_graph`)."""
    return Program(prep, *load_graph(prep, device, max_memory))


def load_isolated(prep: Prepared, device: str, max_memory: Optional[int] = None) -> Program:
    """A :class:`Program` of a :class:`Prepared` capture whose graph lives in a child process, which its
    first run starts and loads (see :func:`wrpkit.run.replay.runtime.load`, ``isolate=True``).

    Raises:
        WrpDeviceError, WrpVersionError, WrpModuleError: It cannot run on ``device`` (checked here,
            before any child starts).
    """
    check_runnable(prep.model, device, what=str(prep.path) if prep.path is not None else "the capture")
    if prep.path is None and prep.kind in ("wrp", "wrpk"):
        prep.source_buffer = bytes(memoryview(prep.source_buffer).cast("B"))  # the caller's buffer may change
        if prep.kind == "wrp":
            prep.wrp_bytes = prep.source_buffer
    return Program(prep, None, str(device), child=ChildGraph(prep, str(device), max_memory))
