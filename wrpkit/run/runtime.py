"""Load a captured program and run it through Warp.

:func:`load` decodes and validates a ``.wrp`` or ``.wrpk`` with wrpkit's own
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
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from ..formats import annotations as ann
from .warp_dtypes import dtype_from_warp, warp_dtype
from ..formats import wrp1
from ..formats.wrp1_layout import CURRENT_FORMAT, upgrade_message
from ..environment import installed_warp_version, parse_device
from ..errors import (
    WrpBindingError,
    WrpDeviceError,
    WrpError,
    WrpFormatError,
    WrpModuleError,
    WrpRuntimeError,
    WrpValidationError,
    WrpVersionError,
)
from ..fileio import modules_dir_for
from ..model import DeviceType

# ---------------------------------------------------------------------------
# Preparation: everything that needs no Warp runtime (shared with the native engine)
# ---------------------------------------------------------------------------


@dataclass
class Prepared:
    """A decoded, validated capture that is ready to load on a device.

    Attributes:
        model: The program (:class:`wrpkit.model.Program`).
        wrp_bytes: The WRP1 bytes to hand to Warp: a view of the mapped file
            for a ``.wrp``; None for a ``.wrpk`` or ``.json`` until
            :meth:`image` re-encodes it (only a load in this process does).
        modules: ``{filename: bytes}`` of every module file the graph names.
        path: The source file, or None when loaded from bytes.
        kind: ``"wrp"`` or ``"wrpk"``.
        annotations: wrpkit's annotations, or None.
        signature: ``{binding name: ArraySignature or None}``.
        sizes: ``{binding name: region size in bytes}``.
    """

    model: object
    wrp_bytes: object
    modules: dict
    path: Optional[Path]
    kind: str
    annotations: Optional[ann.Annotations]
    signature: dict
    sizes: dict
    modules_given: bool = False
    #: The folder the module files were read from (a ``.wrp`` path only).
    modules_dir: Optional[Path] = None
    _keep: list = field(default_factory=list, repr=False)
    # (DeferredChecksum, view of the region's data in the source): checksums
    # still to verify; load_prepared does so while Warp loads the image.
    deferred: list = field(default_factory=list, repr=False)
    #: ``os.stat_result`` of the source file as it was validated (None for bytes).
    source_stat: Optional[os.stat_result] = None
    #: The whole source (the mapped file, or the caller's bytes).
    source_buffer: object = field(default=None, repr=False)

    def image(self):
        """The WRP1 bytes Warp loads: :attr:`wrp_bytes`, encoded from the model the first time."""
        if self.wrp_bytes is None:
            self.wrp_bytes = wrp1.build_image(self.model)[0]
        return self.wrp_bytes


def device_family(device) -> str:
    """``"cpu"`` or ``"cuda"`` for a device string or ``wp.Device``.

    Raises:
        WrpDeviceError: The string names no device family.
    """
    return parse_device(device)[0]


def check_runnable(model, device, warp_version: Optional[str] = None, what: str = "the capture") -> None:
    """Check the device family and the Warp version a program needs.

    Raises:
        WrpDeviceError: The program was captured for another device family.
        WrpVersionError: The program was captured with another Warp version.
    """
    fam = device_family(device)
    want = "cpu" if model.device_type == DeviceType.CPU else "cuda"
    if fam != want:
        arch = f" (sm_{model.target_arch})" if want == "cuda" else ""
        raise WrpDeviceError(
            f"{what} was captured for {want.upper()}{arch} but device {device!s} was requested",
            hint=f"Replay it with --device {'cpu' if want == 'cpu' else 'cuda:0'}, or recapture it on the "
                 f"{fam.upper()} device.")
    if model.format_version != CURRENT_FORMAT:
        # Written by an older Warp (no producer version is recorded): `wrp upgrade` converts it.
        raise WrpVersionError(
            f"{what} cannot be replayed as it is: {upgrade_message(model.format_version)}",
            field="header.version", offset=4,
            hint="Run `wrp upgrade` on it (see `wrp check` for what the conversion keeps), then replay the "
                 "converted file.")
    installed = warp_version if warp_version is not None else installed_warp_version()
    if model.warp_version != installed:
        raise WrpVersionError(
            f"{what} was recorded with Warp {model.warp_version} but the installed Warp is {installed}; "
            "Warp only loads captures of its own version, so a recapture is needed",
            field="metadata.warp_version",
            hint=f"Recapture it with Warp {installed}, or install warp-lang=={model.warp_version} to replay it.")


def _bytes_of(data, what: str):
    try:
        mv = memoryview(data)
    except TypeError:
        raise WrpModuleError(f"{what} must be bytes-like, got {type(data).__name__}") from None
    return mv


def resolve_capture_path(path) -> Path:
    """The capture a user-typed path names: the path itself, or ``path + ".wrp"``
    when the path does not exist and that does (as ``wp.capture_load`` adds the
    extension)."""
    p = Path(os.fspath(path))
    if not os.path.lexists(p) and p.suffix != ".wrp":
        with_ext = p.with_name(p.name + ".wrp")
        if with_ext.exists():
            return with_ext
    return p


def prepare(source, modules: Optional[Mapping] = None, *, verify_checksums: bool = True,
            allow_raw_pointers: bool = False, _validated: bool = False, modules_dir=None) -> Prepared:
    """Decode and validate a capture without loading it into Warp.

    Args:
        source: A path to a ``.wrp`` or ``.wrpk``, or the bytes of one.
        modules: ``{filename: bytes}`` of module files.  Required for the
            bytes of a ``.wrp`` that launches kernels; for a path it replaces
            the files of ``<stem>_modules/``.
        allow_raw_pointers: Accept kernel arguments that hold live process
            pointers (HashGrid, Bvh or Volume ids passed as ``uint64``); by
            default such a file is refused, since its replay in a new process
            dereferences a dangling pointer.
        _validated: Internal (:mod:`wrpkit.run.isolate`): ``source`` is a
            private copy of bytes this process's parent already validated, so
            the validation rules are not applied again.
        verify_checksums: For ``.wrpk``: verify every blob's SHA-256.
        modules_dir: For a ``.wrp`` path: the folder of its module files,
            instead of ``<stem>_modules/`` beside it.

    A path may be a symbolic link (followed; the modules folder is looked for
    beside the link, then beside its target) or a stem without ``.wrp``.

    Raises:
        WrpFormatError: The bytes are not a valid capture.
        WrpValidationError: The program breaks a validation rule, or holds
            raw process pointers (without ``allow_raw_pointers``).
        WrpModuleError: A module file is missing, empty or altered.
    """
    keep = []
    path = None
    modules_given = modules is not None
    # Region-data checksums of a .wrpk are verified on the WRP1 image this
    # function builds (see Prepared.deferred), while Warp loads it.
    deferred = []
    if isinstance(source, (str, os.PathLike)):
        from ..formats.container import open_capture  # noqa: PLC0415

        path = resolve_capture_path(source)
        cap = open_capture(path, verify_checksums=verify_checksums, prefetch=True, deferred=deferred,
                           modules_dir=modules_dir)
        keep.append(cap)
        model, kind = cap.program, cap.kind
        source_buffer, source_stat = cap.mapped.buffer, cap.mapped.stat
        if kind == "wrp":
            wrp_bytes = cap.mapped.buffer
        else:
            wrp_bytes = None
        if modules is None:
            files = cap.load_files()
        else:
            files = None
    else:
        try:
            buf = memoryview(source)
        except TypeError:
            raise WrpError(f"cannot load a {type(source).__name__}: pass a path or the bytes of a .wrp/.wrpk") \
                from None
        buf = buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf
        source_buffer, source_stat = buf, None
        kind = wrp1.sniff(buf)
        if kind == "wrp":
            model = wrp1.decode_wrp1(buf)
            wrp_bytes = buf
        elif kind == "wrpk":
            from ..formats.wrpk import reader  # noqa: PLC0415

            model = reader.decode_wrpk(buf, verify_checksums=verify_checksums, deferred=deferred)
            wrp_bytes = None
        else:
            raise WrpFormatError(f"the data is not a Warp capture: it starts with {bytes(buf[:4])!r}",
                                 hint="Pass the bytes of a .wrp written by wp.capture_save or a .wrpk.")
        keep.append(source)
        files = None
        if modules is None:
            if kind == "wrpk":
                from ..formats.wrpk.builder import module_files  # noqa: PLC0415

                modules = module_files(model)
            else:
                modules = {}
    if files is None:
        if not isinstance(modules, Mapping):
            raise WrpModuleError(f"modules must be a mapping of file name to bytes, got {type(modules).__name__}")
        files = {}
        in_bundle = kind == "wrpk" and not modules_given
        for fname in model.required_module_files():
            if fname not in modules:
                if in_bundle:
                    raise WrpModuleError(f"the bundle carries no bytes for module file {fname!r}",
                                         hint="Rebuild the bundle from the original .wrp.")
                raise WrpModuleError(f"module file {fname!r} is missing from the modules given",
                                     hint="Pass every file of <stem>_modules/ in modules={name: bytes}.")
            files[fname] = _bytes_of(modules[fname], f"module file {fname!r}")
        for fname in model.optional_module_files():
            if fname in modules:
                files[fname] = _bytes_of(modules[fname], f"module file {fname!r}")
    for fname, data in files.items():
        if memoryview(data).nbytes == 0:
            raise WrpModuleError(f"module file {fname!r} is empty",
                                 hint="Copy the module files again from where the capture was made, or recapture.")

    # wrpkit's own validation, before Warp sees anything.
    from ..checks.validate import check_module_symbols, validate_program  # noqa: PLC0415

    problems = [] if _validated else [p for p in validate_program(model)
                                       if getattr(p, "severity", "error") == "error"]
    if problems:
        raise WrpValidationError([str(p) for p in problems],
                                 hint="Run `wrp validate` on the file for the full list.")

    if not allow_raw_pointers and not _validated:
        refuse_raw_pointers(model)

    annotations = ann.read_annotations(model)
    if annotations is not None:
        digests = annotations.digest_map()
        for fname, data in files.items():
            d = digests.get(fname)
            if d is not None and not d.matches(data):
                raise WrpModuleError(
                    f"module file {fname!r} does not match the SHA-256 recorded when the capture was saved",
                    hint="The module file was altered or belongs to another capture; copy the original "
                         "<stem>_modules/ or recapture.")

    # Pin the code: every kernel symbol must be defined in its own module object.
    symbol_problems = [] if _validated else check_module_symbols(model, files)
    if symbol_problems:
        raise WrpModuleError("; ".join(p.message for p in symbol_problems[:3]),
                             hint="The module files do not belong to this capture or were altered; copy the "
                                  "original <stem>_modules/ or recapture.")

    regions = model.region_map()
    sizes, signature = {}, {}
    sig_map = annotations.signature_map() if annotations is not None else {}
    for b in model.resolved_bindings():
        region = regions.get(b.region_id)
        if region is None:
            raise WrpValidationError([f"binding {b.name!r} names region {b.region_id}, which does not exist"])
        sizes[b.name] = region.size
        sig = sig_map.get(b.name)
        if sig is not None:
            try:
                ann.check_fits(sig, region.size)
                ann.element_layout(sig.dtype)
            except WrpBindingError as e:
                raise WrpFormatError(e.message, field="annotations.signature", hint=e.hint) from None
        signature[b.name] = sig

    # Region checksums deferred by the .wrpk decoder are verified on the blobs in the
    # source itself (no image is built here: a contained replay's child maps the file).
    region_sizes = {r.region_id: r.size for r in model.regions}
    checks = [(d, source_buffer[d.offset:d.offset + region_sizes[d.region_id]]) for d in deferred]
    return Prepared(model, wrp_bytes, files, path, kind, annotations, signature, sizes, modules_given,
                    cap.modules_dir if path is not None else None, keep, checks, source_stat, source_buffer)


def refuse_raw_pointers(model) -> None:
    """Refuse a program whose kernel arguments hold live process pointers (see :func:`wrpkit.checks.check.lint_program`).

    Raises:
        WrpValidationError: One problem per argument, naming the kernel, the
            argument and the likely object kind.
    """
    from ..checks.check import raw_pointer_findings  # noqa: PLC0415

    found = raw_pointer_findings(model)
    if found:
        raise WrpValidationError(
            [f.message for f in found],
            hint="Its replay in a new process would dereference a dangling pointer. Replay it in the process "
                 "that captured it, or pass --allow-raw-pointers / allow_raw_pointers=True to run it anyway "
                 "(contained: a crash ends with exit code 4).")


def coerce_input(name: str, value, size: int, sig: Optional[ann.ArraySignature]) -> np.ndarray:
    """Check one input against its binding and return it as a numpy array.

    With a signature (the file records the binding's dtype and shape), the
    input must be an array of exactly the signature's numpy shape and dtype:
    a transposed, flattened or raw-bytes input is refused, and a binding
    that is a view of its region takes the view's shape.  Without one, any
    array (or raw ``bytes``-like object) of exactly ``size`` bytes is taken.

    Args:
        name: Binding name (for messages).
        value: A numpy array, ``wp.array``, or bytes-like object.
        size: The binding's size in bytes.
        sig: The binding's signature, or None.

    Raises:
        WrpBindingError: Wrong dtype, shape or size (a usage error, exit 2).
    """
    if type(value).__module__.startswith("warp"):
        from warp._src import types as wt  # noqa: PLC0415

        if wt.is_array(value):
            value = value.numpy()
    raw = isinstance(value, (bytes, bytearray, memoryview))
    if raw:
        arr = np.frombuffer(value, dtype=np.uint8)
    else:
        arr = np.asarray(value)
    if arr.dtype.hasobject:
        raise WrpBindingError(f"input {name!r} holds Python objects ({arr.dtype}), not numbers")
    if sig is None:
        if arr.nbytes == size:
            return arr
        raise WrpBindingError(f"input {name!r} has {arr.nbytes} bytes (shape {arr.shape}, {arr.dtype}) but the "
                              f"binding holds {size} bytes",
                              hint="Inputs of a binding without a recorded signature must match its size exactly; "
                                   "`wrp replay --dtype NAME=TYPE` gives it a type.")
    base = sig.numpy_dtype()
    # shapes are Warp's (vec3f (8,)); the numpy array asked for is named as such, (8, 3)
    want = (f"{sig.dtype.name} elements of shape {tuple(sig.shape)} (a numpy array of {_np_name(base)}, "
            f"shape {sig.numpy_shape()})")
    if raw:
        raise WrpBindingError(f"input {name!r} is {arr.nbytes} raw bytes but the binding holds {want}",
                              hint=f"Pass a numpy array of shape {sig.numpy_shape()}, e.g. "
                                   f"np.frombuffer(data, {_np_ctor(base)}).reshape{sig.numpy_shape()}.")
    if not ann.dtype_matches(sig.dtype, arr.dtype):
        raise WrpBindingError(
            f"input {name!r} has dtype {arr.dtype} but the binding holds {want}",
            hint=f"Convert it, e.g. x.astype(np.{base.name})." if base.names is None else
            "Pass an array of the struct's structured dtype.")
    if arr.shape != sig.numpy_shape():
        hint = "Pass an array of exactly that shape."
        if arr.size == int(np.prod(sig.numpy_shape(), dtype=np.int64)):
            hint = (f"It holds the same number of elements: if its values are in the right order, pass "
                    f"x.reshape{sig.numpy_shape()}; if it is transposed, transpose it back.")
        raise WrpBindingError(f"input {name!r} has shape {arr.shape} but the binding holds {want}", hint=hint)
    return arr


def _np_name(dt: np.dtype) -> str:
    return "a structured dtype" if dt.names is not None else f"numpy {dt.name}"


def _np_ctor(dt: np.dtype) -> str:
    return "dtype=<the struct's dtype>" if dt.names is not None else f"np.{dt.name}"


def writes_whole_region(sig: Optional[ann.ArraySignature], nbytes: int, size: int) -> bool:
    """True when an input of ``nbytes`` is written over the binding's whole region
    (no signature, or a signature that is the region in C order from byte 0)."""
    if sig is None:
        return nbytes == size
    return sig.byte_offset == 0 and sig.is_contiguous and nbytes == size


def signature_for_type(name: str, type_name: str, size: int) -> ann.ArraySignature:
    """A signature typing an untyped binding as a 1-D array of a Warp type.

    For stock files, which record no signature: ``signature_for_type("x",
    "vec3f", 3072)`` makes ``x`` a ``(256,)`` array of ``vec3f`` (numpy shape
    ``(256, 3)``).  The binding counts as both input and output.

    Args:
        name: Binding name.
        type_name: A Warp type name: ``float32``, ``int32``, ``vec3f``,
            ``mat33d``, ``quatf``, ``transformf``, ...
        size: The binding's size in bytes.

    Raises:
        WrpBindingError: Unknown type, or the size is not a whole number of elements.
    """
    import warp as wp  # noqa: PLC0415

    t = getattr(wp, type_name, None) if type_name.isidentifier() and not type_name.startswith("_") else None
    try:
        dt = dtype_from_warp(t) if t is not None else None
        ann.element_layout(dt) if dt is not None else None
    except (TypeError, WrpError):
        dt = None
    if dt is None or dt.size <= 0:
        raise WrpBindingError(f"--dtype {name}={type_name}: {type_name!r} is not a Warp data type",
                              hint="Use a Warp type name such as float32, int32, vec3f, mat33f, quatf.")
    if size % dt.size:
        raise WrpBindingError(f"--dtype {name}={type_name}: binding {name!r} holds {size} bytes, not a whole "
                              f"number of {type_name} elements ({dt.size} bytes each)",
                              hint="Check the type: the binding's size must be a multiple of its element size.")
    n = size // dt.size
    return ann.ArraySignature(name, dt, (n,), (dt.size,), 0, True, True)


def closest_name(name: str, known) -> Optional[str]:
    """The known name a misspelt ``name`` most likely meant (case aside, or a close spelling), or None."""
    import difflib  # noqa: PLC0415

    known = list(known)
    for k in known:
        if k.lower() == str(name).lower():
            return k
    hits = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    return hits[0] if hits else None


def unknown_binding(name, known) -> WrpBindingError:
    """The error for a binding name the program does not have, with a "did you mean" where one is close."""
    known = list(known)
    names = ", ".join(repr(n) for n in known) or "none"
    guess = closest_name(name, known)
    return WrpBindingError(f"unknown binding {name!r}" + (f" (did you mean {guess!r}?)" if guess else "")
                           + f"; this program binds: {names}")


# ---------------------------------------------------------------------------
# The runnable program
# ---------------------------------------------------------------------------


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
        graph: Warp's loaded ``wp.Graph``.
        device: The ``wp.Device`` it runs on.
        path: The source file, or None.
        annotations: wrpkit's annotations, or None.
    """

    def __init__(self, prepared: Prepared, graph, device):
        self.model = prepared.model
        self.graph = graph
        self.device = device
        self.path = prepared.path
        self.annotations = prepared.annotations
        self._prepared = prepared
        self._closed = False
        self._bundle = None
        self._lock = threading.RLock()
        self._sig = dict(prepared.signature)
        self._sizes = dict(prepared.sizes)
        self._is_cpu = bool(device.is_cpu)
        self._slots = {}
        for name, size in self._sizes.items():
            ptr = graph.get_param_ptr(name)
            if not ptr and size:
                raise WrpRuntimeError(f"Warp has no memory for binding {name!r}")
            slot = _Slot(name, size, int(ptr or 0), self._sig.get(name))
            if self._is_cpu:
                # The views own the graph (which owns the memory), not this Program:
                # no reference cycle, and a view outliving the Program stays valid.
                slot.region = (np.asarray(_HostMemory(slot.ptr, size, graph)) if size
                               else np.zeros(0, dtype=np.uint8))
                slot.view = ann.view_region(slot.region, slot.sig) if slot.sig is not None else slot.region
            self._slots[name] = slot

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

    def __repr__(self) -> str:
        src = f" {self.path}" if self.path else ""
        return f"<wrpkit.run.runtime.Program{src} on {self.device} bindings={list(self._sizes)}>"

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
        import warp as wp  # noqa: PLC0415

        self._check_open()
        wp.capture_launch(self.graph)

    @_serialised
    def reset(self) -> None:
        """Restore every binding to the bytes it held when the graph was captured.

        After ``reset()``, a replay with the same inputs gives what the first
        replay after :func:`load` gave.  Memory that is not bound to a name
        (scratch buffers of the graph) is not reachable by name and keeps its
        bytes; a graph that carries state there from one replay to the next
        must be loaded again instead.

        Raises:
            WrpError: The program is closed.
            WrpRuntimeError: Warp failed to write a binding.
        """
        self._check_open()
        regions = self.model.region_map()
        for b in self.model.resolved_bindings():
            slot = self._slots.get(b.name)
            if slot is None:
                continue
            region = regions[b.region_id]
            if region.data is not None and region.has_initial_data:
                data = np.frombuffer(region.data, dtype=np.uint8, count=slot.size)
            else:
                data = np.zeros(slot.size, dtype=np.uint8)
            self._write_raw(slot, data)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            src = f" ({self.path})" if self.path else ""
            raise WrpError(f"this Program{src} is closed: its graph and memory were released by close()",
                           hint="Load it again with wrpkit.load(...), or close it only when done with it.")

    def __reduce__(self):
        """Pickle as the program's ``.wrpk`` bundle bytes plus its device.

        A worker process (``multiprocessing``, ``concurrent.futures``, Ray,
        Dask) unpickles it by loading the bundle from memory: the captured
        program, not the current contents of its bindings, travels.
        """
        self._check_open()
        return (_program_from_bundle, (self.bundle_bytes(), str(self.device)))

    def bundle_bytes(self) -> bytes:
        """The program as ``.wrpk`` bundle bytes (module binaries inside), made once and kept."""
        self._check_open()
        if self._bundle is None:
            from ..formats.wrpk import builder  # noqa: PLC0415

            self._bundle = builder.encode_wrpk(self.model, self._prepared.modules)
        return self._bundle

    @_serialised
    def run(self, inputs: Optional[Mapping] = None, repeat: int = 1, *, outputs=None, copy: bool = True,
            isolate: bool = False, timeout: Optional[float] = None) -> dict:
        """Set inputs, replay ``repeat`` times, and read the outputs back.

        Only what is asked for is read back: by default the outputs of the
        signature (every binding when the file records none), or the bindings
        named in ``outputs``.  With ``copy=False`` the results are read in
        place: on CPU, numpy views of the graph's memory (no copy at all; the
        next replay changes them, and they keep the memory alive); on CUDA,
        ``wp.array`` views of the device memory (:meth:`array`).

        With ``isolate=True`` the replays run in a child process that starts
        from this program's current bindings; its results are written back
        here.  A fatal signal in kernel code or in Warp's runtime then raises
        :class:`~wrpkit.errors.WrpCrashError` (a ``WrpRuntimeError``) naming
        the op that crashed, instead of ending this process; ``timeout``
        (seconds) bounds the child.  It costs a process start and a load per
        call (see the README's benchmarks).

        Runs on one Program from several threads are serialised (see the
        class's "Threads").

        Args:
            inputs: ``{name: array}`` (numpy arrays, ``wp.array`` or
                bytes-like).  With a recorded signature each must have exactly
                its numpy shape and dtype (a view binding takes the view's
                shape); without one, exactly the binding's bytes.
            repeat: Number of replays (0 only sets inputs and reads back).
            outputs: Names of the bindings to return (None: :attr:`outputs`;
                ``"*"``: every binding; ``[]``: none, the fastest run).
            copy: False: return views of the graph's memory instead of copies.

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
        import warp as wp  # noqa: PLC0415

        self._check_open()
        names = self._asked(outputs)
        if isolate:
            self._run_isolated(inputs, repeat, timeout)
            return self._results(names, copy)
        if inputs:
            if not isinstance(inputs, Mapping):
                raise WrpBindingError(f"inputs must be a mapping of binding name to array, got "
                                      f"{type(inputs).__name__}")
            checked = [(self._slot(n), self._as_input(n, v)) for n, v in inputs.items()]
            for slot, arr in checked:
                self._write(slot, arr)
        repeat = int(repeat)
        if repeat < 0:
            raise WrpError(f"repeat must be >= 0, got {repeat}")
        graph, launch = self.graph, wp.capture_launch
        try:
            for _ in range(repeat):
                launch(graph)
        except RuntimeError as e:
            raise WrpRuntimeError(f"Warp failed to replay the graph: {e}") from None
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
        if self._is_cpu:
            return {name: self._slots[name].view for name in names}
        return {name: self.array(name) for name in names}

    def _run_isolated(self, inputs, repeat, timeout) -> dict:
        from .isolate import replay_in_child  # noqa: PLC0415

        state = {name: self._read_raw(slot) for name, slot in self._slots.items()}
        if inputs:
            if not isinstance(inputs, Mapping):
                raise WrpBindingError(f"inputs must be a mapping of binding name to array, got "
                                      f"{type(inputs).__name__}")
            for n, v in inputs.items():
                slot = self._slot(n)
                arr = self._as_input(n, v)
                if arr.nbytes == slot.size:
                    state[n] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
                else:  # a view binding: write through the signature
                    ann.view_region(state[n], slot.sig)[...] = arr
        repeat = int(repeat)
        if repeat < 0:
            raise WrpError(f"repeat must be >= 0, got {repeat}")
        run = replay_in_child(self._prepared, str(self.device), state, repeat, timeout=timeout, raw=True)
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
        """One binding as a numpy array: a zero-copy view on CPU, a copy on CUDA.

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
        import warp as wp  # noqa: PLC0415

        slot = self._slot(name)
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

        Later calls other than ``close`` raise an error saying the program is closed.
        """
        self._closed = True
        self._slots = {}
        self.graph = None
        _release(self._prepared)


def _release(prepared) -> None:
    """Close the mappings a prepared capture keeps alive (best effort: closing never fails a caller)."""
    for k in prepared._keep:
        close = getattr(k, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001
                pass


#: Programs unpickled in this process: {(bundle header, size, device): [Program, ...]}.
_unpickled: dict = {}
_unpickled_lock = threading.Lock()
#: Graphs kept per bundle and device (one per task that held one at the same time).
_UNPICKLED_PER_BUNDLE = 8


def _reusable(prog: Program) -> bool:
    """Whether :meth:`Program.reset` restores all of ``prog``'s state: every region is bound
    (memory no binding names keeps what the last run left, so such a graph is loaded afresh)."""
    bound = {b.region_id for b in prog.model.bindings}
    return all(r.region_id in bound for r in prog.model.regions)


def _program_from_bundle(bundle: bytes, device: str) -> Program:
    """Unpickle a :class:`Program`: load its bundle bytes from memory on ``device``.

    A worker that unpickles the same bundle again (Ray and Dask ship a task's
    arguments with every task) gets a graph it loaded before, reset to its
    captured values, instead of a second load (unpickling is a full load) --
    but only a graph nobody holds any more: a Program is never handed to two
    holders at once, so tasks running side by side (threads) each have their
    own graph, whichever thread unpickled their arguments.  Only graphs whose
    every region is bound are reused (:meth:`Program.reset` restores all of
    their state); others load afresh.  Warp's banner is off.
    """
    import sys  # noqa: PLC0415

    from ..environment import init_warp  # noqa: PLC0415

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
    init_warp(cpu_only=str(device).strip().lower() == "cpu")
    prog = load(bundle, device=device)
    if _reusable(prog):
        with _unpickled_lock:
            pool = _unpickled.setdefault(key, [])
            if len(pool) < _UNPICKLED_PER_BUNDLE:
                pool.append(prog)
    return prog


def resolve_device(device):
    """The ``wp.Device`` for a device string (or a ``wp.Device``).

    Raises:
        WrpDeviceError: Unknown device, or CUDA requested without a CUDA device.
    """
    import warp as wp  # noqa: PLC0415

    fam = device_family(device)
    if not isinstance(device, str) and device is not None:
        return device
    if fam == "cuda" and wp.get_cuda_device_count() == 0:
        raise WrpDeviceError(f"device {device} was requested but no CUDA device is available",
                             hint="Run on a machine with an NVIDIA GPU and driver, or use a CPU capture.")
    try:
        return wp.get_device(device)
    except (RuntimeError, ValueError, KeyError, IndexError) as e:
        raise WrpDeviceError(f"cannot use device {device!r}: {e}",
                             hint=f"Available devices: {', '.join(str(d) for d in wp.get_devices())}.") from None


def device_free_memory(dev) -> Optional[int]:
    """Bytes a new allocation on ``dev`` (a ``wp.Device``) can take: CUDA's free memory, or the host's
    available memory (:func:`wrpkit.checks.memory.host_available`); None when unknown."""
    from ..checks.memory import host_available  # noqa: PLC0415

    if dev.is_cuda:
        try:
            return int(dev.free_memory)
        except Exception:  # noqa: BLE001  (an old Warp, or no driver answer: unknown)
            return None
    return host_available()


def check_memory(model, dev, max_memory: Optional[int] = None) -> None:
    """Refuse a capture whose regions would not fit the device's free memory (or ``max_memory``).

    Raises:
        WrpOutOfMemoryError: It does not fit; nothing was allocated.
    """
    from ..checks.memory import check_budget  # noqa: PLC0415

    check_budget(model, str(dev), device_free_memory(dev) if max_memory is None else None, max_memory)


def _warp_load_error(e, what: str, dev, model) -> WrpError:
    """The error for Warp's failure to load: out of memory (one status, with the size) when Warp says so."""
    text = str(e)
    said = _stderr_tail()  # Warp prints its reason on stderr; a replay child's stderr is a memory file
    oom = re.compile(r"out of memory|failed to allocate|cannot allocate|std::bad_alloc|ENOMEM", re.IGNORECASE)
    reason = next((ln.strip() for ln in reversed(said.splitlines()) if oom.search(ln)), "")
    if reason and not oom.search(text):
        text = f"{text.rstrip(': ')}: {reason}"
    if not oom.search(text) and not _can_reserve(model):
        text = f"{text.rstrip(': ')}: the memory its regions declare cannot even be reserved"
    if oom.search(text) or "cannot even be reserved" in text:
        from ..checks.memory import declared_memory  # noqa: PLC0415
        from ..errors import WrpOutOfMemoryError  # noqa: PLC0415

        need = declared_memory(model)
        return WrpOutOfMemoryError(f"Warp ran out of memory loading {what} on {dev} (the capture declares "
                                   f"{need.describe()}): {text}", requested=need.total, device=str(dev),
                                   hint="Free memory or replay on a larger device.")
    return WrpRuntimeError(f"Warp could not load {what}: {text}",
                           hint="Warp's own diagnostic, if any, is printed on stderr above.")


def _stderr_tail(limit: int = 4096) -> str:
    """The end of what this process wrote on stderr when fd 2 is a file (a replay child's memory file)."""
    import stat as st  # noqa: PLC0415

    try:
        info = os.fstat(2)
        if not st.S_ISREG(info.st_mode):
            return ""
        return os.pread(2, limit, max(0, info.st_size - limit)).decode("utf-8", "replace")
    except OSError:
        return ""


def _can_reserve(model) -> bool:
    """Whether address space for every region could be reserved now (a failed Warp load with no reason:
    was it memory?).  The reservation is never touched, so it costs no memory."""
    import mmap  # noqa: PLC0415

    from ..checks.memory import declared_memory  # noqa: PLC0415

    total = declared_memory(model).total
    if not total:
        return True
    try:
        mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0),
                  prot=mmap.PROT_READ).close()
        return True
    except (OSError, ValueError, OverflowError, MemoryError):
        return False


def load_prepared(prep: Prepared, device="cpu", max_memory: Optional[int] = None) -> Program:
    """Load a :class:`Prepared` capture into Warp (see :func:`load`)."""
    import warp as wp  # noqa: PLC0415

    what = str(prep.path) if prep.path is not None else "the capture"
    check_runnable(prep.model, device, what=what)
    dev = resolve_device(device)
    check_memory(prep.model, dev, max_memory)  # before anything is allocated
    # prepare() picked exactly the files Warp needs (and .cu sources when present).
    binaries = prep.modules
    # Region data holds no code and has passed validation, so its checksums
    # are verified while Warp copies it (hashlib and Warp's loader both
    # release the GIL); the graph is returned only if they match.  Module
    # blobs were verified before this point.
    verification = None
    if prep.deferred:
        from ..formats.wrpk.blobs import BackgroundVerification  # noqa: PLC0415

        verification = BackgroundVerification(prep.deferred)
    try:
        if dev.is_cuda and prep.kind == "wrp" and prep.path is not None and not prep.modules_given \
                and prep.modules_dir == modules_dir_for(prep.path) and not os.path.islink(prep.path):
            # capture_load can also compile the packaged source fallback.
            graph = wp.capture_load(os.fspath(prep.path), device=dev)
        elif hasattr(wp, "capture_load_from_bytes"):
            built = prep.wrp_bytes is None
            image = prep.image()
            if built and prep.path is not None:
                # The image now holds the region data; let the mapped bundle's
                # pages go so the file is not resident twice while Warp copies it.
                for k in prep._keep:
                    mapped = getattr(k, "mapped", None)
                    if mapped is not None:
                        mapped.drop_pages()
            graph = wp.capture_load_from_bytes(image, modules=binaries, device=dev)
        else:  # pragma: no cover  (older Warp)
            graph = _load_via_dir(prep, binaries, dev)
    except MemoryError:
        from ..checks.memory import declared_memory  # noqa: PLC0415
        from ..errors import WrpOutOfMemoryError  # noqa: PLC0415

        need = declared_memory(prep.model)
        raise WrpOutOfMemoryError(f"out of memory while loading {what} on {dev} (the capture declares "
                                  f"{need.describe()})", requested=need.total, device=str(dev),
                                  hint="Free memory or replay on a larger device.") from None
    except (RuntimeError, TypeError, ValueError) as e:
        raise _warp_load_error(e, what, dev, prep.model) from None
    finally:
        if verification is not None:
            try:
                verification.wait()
            except WrpError:
                graph = None  # never hand out a graph whose data failed its checksum
                raise
            prep.deferred = []  # verified
    return Program(prep, graph, dev)


def _load_via_dir(prep: Prepared, binaries: dict, dev):  # pragma: no cover
    import tempfile  # noqa: PLC0415

    import warp as wp  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="wrpkit-load-") as d:
        p = Path(d) / "capture.wrp"
        p.write_bytes(bytes(prep.image()))
        (Path(d) / "capture_modules").mkdir()
        for name, data in binaries.items():
            (Path(d) / "capture_modules" / name).write_bytes(bytes(data))
        return wp.capture_load(os.fspath(p), device=dev)


class IsolatedProgram:
    """A validated capture that replays in a child process (see ``load(isolate=True)``).

    Nothing of Warp runs in this process.  The child starts at the first
    :meth:`run`, loads the graph once and stays, so a later run costs a
    request and the bindings' bytes; its memory persists between runs as in a
    :class:`Program`.  When a run crashes, times out or fails, that child is
    gone and the next run starts a new one from the file's data and the
    bindings as the last successful run left them.  :meth:`close` (or the
    program's garbage collection) ends the child.

    Threads: safe to share, like :class:`Program`: requests to the child are
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
        return f"<wrpkit.run.runtime.IsolatedProgram{src} on {self.device} bindings={list(self._sizes)}>"

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
    def run(self, inputs: Optional[Mapping] = None, repeat: int = 1, *, outputs=None, copy: bool = True,
            isolate: bool = True, timeout: Optional[float] = None) -> dict:
        """Set inputs, replay ``repeat`` times in a child process, and return the outputs.

        Every binding comes back from the child (through shared memory: a new
        child after a crash starts from them); only ``outputs`` are returned.

        Args:
            inputs: As for :meth:`Program.run`.
            repeat: Number of replays.
            outputs: As for :meth:`Program.run` (None: the signature's outputs).
            copy: False: views of this program's copy of the bindings (valid until the next run).
            isolate: Must be True (an isolated program has no graph in this process).
            timeout: Seconds for the child (None: no limit).

        Raises:
            WrpBindingError: An unknown name, a size or dtype mismatch.
            WrpCrashError: The replay died of a fatal signal; nothing changed here.
            WrpTimeoutError: ``timeout`` ran out.
            WrpRuntimeError: Warp failed to load or replay it.
        """
        from .isolate import ReplayWorker, replay_in_worker  # noqa: PLC0415

        names = self._asked(outputs)
        if not isolate:
            raise WrpError("this program was loaded with isolate=True; load it again without to run in-process")
        before, dirty = dict(self._state), set(self._dirty)
        if inputs:
            if not isinstance(inputs, Mapping):
                raise WrpBindingError(f"inputs must be a mapping of binding name to array, got "
                                      f"{type(inputs).__name__}")
            try:
                for n, v in inputs.items():
                    self.set(n, v)
            except WrpError:
                self._state, self._dirty = before, dirty
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
            run = replay_in_worker(self._worker, send, repeat, timeout=timeout, full_state=self._state)
        except BaseException:
            self._state, self._dirty = before, dirty  # a failed run changes nothing here (its child is gone)
            raise
        self._dirty.clear()
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
        _release(self._prepared)


def load(path_or_bytes, device="cpu", modules: Optional[Mapping] = None, *, isolate: bool = False,
         allow_raw_pointers: bool = False, modules_dir=None, max_memory=None):
    """Load a ``.wrp`` or ``.wrpk`` (path or bytes) as a runnable :class:`Program`.

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
            pointers (refused by default: see :func:`prepare`).
        modules_dir: For a ``.wrp`` path: the folder of its module files
            (default: ``<stem>_modules/`` beside the path, or beside a
            symbolic link's target).
        max_memory: Bytes (or a size such as ``"64G"``) the load may
            allocate, replacing the check against the device's free memory
            (host: available memory; CUDA: free device memory) that runs
            before anything is allocated.

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
    """
    from ..checks.memory import parse_size  # noqa: PLC0415

    max_memory = parse_size(max_memory) if max_memory is not None else None
    prep = prepare(path_or_bytes, modules, allow_raw_pointers=allow_raw_pointers, modules_dir=modules_dir)
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


__all__ = ["load", "prepare", "load_prepared", "Program", "IsolatedProgram", "Prepared", "refuse_raw_pointers", "check_runnable", "device_family",
           "coerce_input", "unknown_binding", "resolve_device", "resolve_capture_path", "writes_whole_region",
           "signature_for_type"]
