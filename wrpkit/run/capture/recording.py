"""Capture Warp work and save it with a typed signature.

:func:`capture` (a context manager), or :func:`begin_capture` /
:func:`end_capture`, record Warp work with ``wp.capture_begin(apic=True)`` and
give a :class:`Recording`: Warp's graph, launchable live, plus the program in
wrpkit's model.  :meth:`Recording.save` (or :func:`save` for a graph captured
with plain ``wp.capture_begin(apic=True)``) writes a ``.wrp`` that stock
``wp.capture_load`` loads, with wrpkit's annotations in an extra section:

* the typed signature of every binding (dtype, shape, byte strides, byte
  offset in its region, input/output flags),
* the argument signature of every captured kernel,
* the SHA-256 of every module file,
* where each op was issued in the user's program (file, line, function and a
  short stack: :mod:`wrpkit.run.capture.call_sites`) and where each kernel is defined.

Example::

    with wrpkit.capture(device="cpu") as rec:
        wp.launch(saxpy, dim=n, inputs=[2.0, x, y])
    rec.launch()                                  # replay live
    rec.save("saxpy.wrp", inputs={"x": x, "y": y}, outputs={"y": y})
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Optional

import warp as wp

from ... import records
from ...formats import annotations as ann
from ..warp_bridge.dtypes import signature_of_array
from ..warp_bridge.internals import apic_capture
from .access import kernel_signature
from ...formats import wrp1
from ...errors import WrpBindingError, WrpError, WrpRuntimeError
from ...atomic_writes import publish_wrp
from ...file_reads import map_file, read_file
from ...module_dirs import modules_dir_for
from ...ops import KernelLaunch, walk_ops

_lock = threading.Lock()
_active: list = []  # pending Recordings, innermost last (Warp allows one at a time)


class Recording:
    """A graph captured by wrpkit: Warp's graph plus its program in wrpkit's model.

    Attributes:
        graph: The ``wp.Graph`` (None until the capture ends).
        device: The ``wp.Device`` the graph was captured on.
        stream: The stream given to :func:`begin_capture`, or None.
    """

    def __init__(self, device, stream=None):
        self.device = device
        self.stream = stream
        self.graph = None
        self._program = None
        self._mapped = None  # keeps the buffer that _program views alive
        self._launches = _LaunchLog()
        self._sites = None  # the CallSiteLog while capturing (None when call sites are off)
        self.lint_findings = None  # set when the capture ends (see end_capture)
        #: ``[(call, stack)]``: structure calls (``Mesh.refit()``, ...) the capture ran but Warp did not record.
        self.unrecorded_calls = []

    @property
    def complete(self) -> bool:
        """True once the capture has ended."""
        return self.graph is not None

    def _need_graph(self):
        if self.graph is None:
            raise WrpError("the capture has not ended yet",
                           hint="Use the Recording after the `with wrpkit.capture()` block, or after end_capture().")
        return self.graph

    def launch(self, stream=None) -> None:
        """Replay the captured graph live (``wp.capture_launch``)."""
        wp.capture_launch(self._need_graph(), stream=stream)

    @property
    def program(self):
        """The captured program in wrpkit's model (:class:`wrpkit.model.Program`).

        Computed on first use by saving through Warp into a temporary
        directory; region contents are the arrays' contents at that moment.
        After :meth:`save` it is the program that was written.
        """
        if self._program is None:
            with tempfile.TemporaryDirectory(prefix="wrpkit-rec-") as d:
                prog, mapped, _ = _export(self._need_graph(), Path(d), {}, {})
            self._program, self._mapped = prog, mapped
            if self.lint_findings is None:
                self.lint_findings = warn_lints(prog)
        return self._program

    def save(self, path, inputs: Optional[Mapping] = None, outputs: Optional[Mapping] = None, *,
             allow_raw_pointers: bool = False) -> Path:
        """Save the graph to a ``.wrp`` (plus ``<stem>_modules/``) with typed signatures.

        Args:
            path: Destination; ``.wrp`` is appended when missing (as Warp
                does).  A ``.wrpk`` path writes one self-contained bundle.
            inputs: ``{name: wp.array}`` bound as inputs.
            outputs: ``{name: wp.array}`` bound as outputs.  A name may be both
                an input and an output when it names the same array (in place).
            allow_raw_pointers: Save a graph whose kernels are passed live process
                pointers anyway (see :func:`save`).

        Returns:
            The path of the file written.

        Raises:
            WrpValidationError: A kernel argument holds a live process pointer (a
                HashGrid, Bvh, Volume or Mesh id passed as ``wp.uint64``); the hint
                says which line to change.  Nothing is written.
        """
        from ...formats.container import open_capture  # noqa: PLC0415

        # The lint already ran when the capture ended; save() must not repeat it.
        dest = save(self._need_graph(), path, inputs, outputs, lint=self.lint_findings is None,
                    allow_raw_pointers=allow_raw_pointers)
        cap = open_capture(dest)
        self._program, self._mapped = cap.program, cap
        return dest

    def verify(self, step, inputs: Optional[Mapping] = None, outputs: Optional[Mapping] = None, **kwargs):
        """Check that this recording, saved, does what ``step()`` does live.

        Delegates to the public :func:`wrpkit.verify` (``recording=self``);
        see it for the arguments and the report.  Resolved through the
        package's lazy names at call time: ``run/`` never imports ``debug/``.
        """
        import wrpkit  # noqa: PLC0415

        return wrpkit.verify(step, inputs or {}, outputs or {}, recording=self, **kwargs)

    def __repr__(self) -> str:
        state = "complete" if self.graph is not None else "recording"
        return f"<wrpkit.Recording {state} on {self.device}>"


class WrpLintWarning(UserWarning):
    """A capture that saves but may not replay correctly in another process."""


def warn_lints(prog, stacklevel: int = 3) -> list:
    """Issue a :class:`WrpLintWarning` for each lint finding of a captured program.

    Each warning names the kernel and the argument and says how to fix the
    capture (see :func:`wrpkit.checks.check.lint_program`).

    Args:
        prog: A :class:`wrpkit.model.Program` (only its kernel launches are read).
        stacklevel: Passed to :func:`warnings.warn`.

    Returns:
        The findings.
    """
    from ...checks.check import lint_program  # noqa: PLC0415

    return _warn(lint_program(prog), stacklevel)


def _warn_unrecorded(log, stacklevel: int) -> list:
    """A :class:`WrpLintWarning` for each structure call (``Mesh.refit()``, ...) that ran during the
    capture without being recorded; returns ``[(call text, stack)]`` (the saved file keeps them
    for ``wrp check``)."""
    import warnings  # noqa: PLC0415

    from ...checks.check import unrecorded_call_message  # noqa: PLC0415
    from ...checks.sources import where_text  # noqa: PLC0415

    seen = set()
    for call, stack in log.unrecorded:
        where = where_text(dict(zip(("file", "line", "function"), stack[0]))) if stack else ""
        if (call, where) in seen:
            continue
        seen.add((call, where))
        text, fix = unrecorded_call_message(call, where)
        warnings.warn(WrpLintWarning(f"{text}. Fix: {fix}"), stacklevel=stacklevel + 1)
    return list(log.unrecorded)


def _warn(findings: list, stacklevel: int) -> list:
    import warnings  # noqa: PLC0415

    for f in findings:
        warnings.warn(WrpLintWarning(f"{f.message}. Fix: {f.fix}"), stacklevel=stacklevel + 1)
    return findings


class _LaunchLog:
    """The kernel launches of a capture in progress, as Warp hands them to its recorder.

    Warp builds one ``APICLaunchInfo`` per recorded launch
    (``APICapture.build_launch_info``); it holds exactly the argument bytes,
    parameter records and relocations that ``capture_save`` later writes.
    Keeping a copy of each distinct one lets the lint run when the capture
    ends, without saving the graph (which would snapshot every region).
    """

    def __init__(self):
        self.launches = []
        self.attached = False  # True once a recorder was observed (Warp's internals as expected)
        self._seen = set()
        self._apic = None

    def attach(self, apic) -> None:
        original = apic.build_launch_info

        def build_launch_info(*args, **kwargs):
            info = original(*args, **kwargs)
            try:
                self._record(info)
            except Exception:  # noqa: BLE001 -- the lint must never break a capture
                pass
            return info

        self._apic, self.attached = apic, True
        # An instance attribute: only this capture's recorder is observed.
        apic.build_launch_info = build_launch_info

    def detach(self) -> None:
        if self._apic is not None:
            with contextlib.suppress(AttributeError):
                del self._apic.build_launch_info
            self._apic = None

    def _record(self, info) -> None:
        import ctypes  # noqa: PLC0415

        from ...ops import LaunchParam, Relocation  # noqa: PLC0415

        def params(arr):
            if not arr or not info.num_params:
                return []
            return [LaunchParam(p.param_index, p.num_relocs, p.value_offset, p.value_size, p.value_align)
                    for p in arr[:info.num_params]]

        value = ctypes.string_at(info.value_data, info.value_data_size) if info.value_data_size else b""
        fwd = params(info.params)
        adj = params(info.adj_params) if not info.is_forward else []
        rels = ([Relocation(r.value_byte_offset, r.region_id, r.region_offset, r.kind)
                 for r in info.relocs[:info.num_relocs]] if info.num_relocs else [])
        key = (info.kernel_key, info.module_hash, bool(info.is_forward), value, tuple(fwd), tuple(adj), tuple(rels))
        if key in self._seen:  # a step loop repeats identical launches; lint each once
            return
        self._seen.add(key)
        self.launches.append(KernelLaunch(
            shape=(), ndim=0, size=0, dim=info.kernel_dim, max_blocks=0, block_dim=0, smem_bytes=0, grid_stride=0,
            is_forward=bool(info.is_forward), cluster_dim=0, kernel_key=info.kernel_key.decode("utf-8", "replace"),
            module_hash=info.module_hash.decode("utf-8", "replace"), params=fwd, adjoint_params=adj,
            relocations=rels, value_data=value))


def begin_capture(device=None, stream=None, force_module_load: Optional[bool] = None, external: bool = False,
                  capture_mode=wp.CaptureMode.THREAD_LOCAL, *, call_sites: bool = True) -> Recording:
    """Begin capturing Warp work (``wp.capture_begin(..., apic=True)``).

    Takes exactly the parameters of ``wp.capture_begin`` except ``apic``,
    which is always on.  Returns the pending :class:`Recording`, which
    :func:`end_capture` completes.

    Args:
        call_sites: Record where each op is issued in the program (file,
            line, function, short stack), saved in the annotations.  False
            skips it (``bench/bench_call_sites.py`` measures what it costs).
    """
    with _lock:
        try:
            wp.capture_begin(device=device, stream=stream, force_module_load=force_module_load, external=external,
                             apic=True, capture_mode=capture_mode)
        except RuntimeError as e:
            raise WrpRuntimeError(f"cannot begin the capture: {e}") from None
        dev = stream.device if stream is not None else wp.get_device(device)
        rec = Recording(dev, stream)
        apic = apic_capture()
        if apic is not None and hasattr(apic, "build_launch_info"):
            rec._launches.attach(apic)
        if call_sites and apic is not None:
            from . import call_sites as cs  # noqa: PLC0415

            rec._sites = cs.start(apic)
        _active.append(rec)
    return rec


def _end_locked(rec: Recording):
    """Stop observing and end ``rec``'s Warp capture; return Warp's graph.  The caller holds ``_lock``."""
    _active.remove(rec)
    rec._launches.detach()
    if rec._sites is not None:
        from . import call_sites as cs  # noqa: PLC0415

        cs.stop(rec._sites)
    try:
        if rec.device.is_cpu:
            return wp.capture_end(device=rec.device)
        return wp.capture_end(device=rec.device, stream=rec.stream)
    except RuntimeError as e:
        raise WrpRuntimeError(f"the capture failed: {e}") from None


def end_capture(_stacklevel: int = 2) -> Recording:
    """End the capture begun by :func:`begin_capture` and return its Recording.

    The captured launches are linted here: a :class:`WrpLintWarning` is
    issued for each pattern that would save but not replay in another process
    (e.g. a HashGrid id passed as ``uint64``), and the findings are kept in
    ``Recording.lint_findings``.
    """
    with _lock:
        if not _active:
            raise WrpError("no wrpkit capture is in progress", hint="Call begin_capture() first.")
        rec = _active[-1]
        graph = _end_locked(rec)
    rec.graph = graph
    if rec._sites is not None:
        with contextlib.suppress(Exception):  # the graph carries them to save(); never break a capture
            graph._wrpkit_call_sites = rec._sites
        rec.unrecorded_calls = _warn_unrecorded(rec._sites, _stacklevel)
        rec._sites = None
    if rec._launches.attached:
        from ...checks.check import lint_launches  # noqa: PLC0415

        rec.lint_findings = _warn(lint_launches(rec._launches.launches), _stacklevel)
    rec._launches = _LaunchLog()  # the copies are no longer needed
    return rec


@contextlib.contextmanager
def capture(device=None, stream=None, force_module_load: Optional[bool] = None, external: bool = False,
            capture_mode=wp.CaptureMode.THREAD_LOCAL, *, call_sites: bool = True):
    """Capture the Warp work issued in a ``with`` block.

    Takes exactly the parameters of ``wp.capture_begin`` except ``apic``
    (always on).  Yields a :class:`Recording`, complete after the block.
    If the block raises, the capture is ended and discarded.

    Args:
        call_sites: Record where each op is issued (file, line, function and a
            short stack, ``wrp inspect --ops`` shows it); False skips it.
    """
    rec = begin_capture(device=device, stream=stream, force_module_load=force_module_load, external=external,
                        capture_mode=capture_mode, call_sites=call_sites)
    try:
        yield rec
    except BaseException:
        with _lock, contextlib.suppress(Exception):
            _end_locked(rec)  # discarded: not linted
        rec.graph = None
        raise
    # Warnings point at the `with` statement: end_capture <- capture <- contextlib __exit__ <- user.
    end_capture(_stacklevel=4)


# ---------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------


def _check_bindings(graph, inputs: Mapping, outputs: Mapping) -> None:
    import warp.types as wt  # noqa: PLC0415

    for role, d in (("input", inputs), ("output", outputs)):
        if not isinstance(d, Mapping):
            raise WrpBindingError(f"{role}s must be a mapping of name to wp.array, got {type(d).__name__}")
        for name, arr in d.items():
            if not isinstance(name, str) or not name:
                raise WrpBindingError(f"{role} binding names must be non-empty strings, got {name!r}")
            if not wt.is_array(arr) or not isinstance(arr, wp.array):
                raise WrpBindingError(f"{role} {name!r} must be a wp.array, got {type(arr).__name__}")
            if arr.device != graph.device:
                raise WrpBindingError(f"{role} {name!r} is on {arr.device} but the graph was captured on "
                                      f"{graph.device}")
    for name in set(inputs) & set(outputs):
        a, b = inputs[name], outputs[name]
        if a is not b and (a.ptr != b.ptr or a.shape != b.shape or a.strides != b.strides or a.dtype != b.dtype):
            raise WrpBindingError(f"{name!r} is bound both as an input and an output but names different arrays",
                                  hint="An in-place binding must pass the same array in inputs and outputs.")


def _byte_offset(apic_capture, arr) -> int:
    try:
        return int(apic_capture._find_base(arr)[3])
    except Exception:  # noqa: BLE001  (private Warp API: fall back to a whole-allocation view)
        return 0


def _kernel_signatures(graph, prog) -> list:
    """Argument signatures of the captured kernels, from Warp's kernel objects."""
    cap = graph._apic_capture
    collected = getattr(cap, "collected_modules", {}) or {}
    first_launch = {}
    for _, op in walk_ops(prog.ops):
        if isinstance(op, KernelLaunch) and op.is_forward:
            first_launch.setdefault((op.module_hash, op.kernel_key), op)
    out = []
    for k in prog.kernels:
        info = collected.get(k.module_hash)
        if info is None:
            continue
        kernel = None
        names = getattr(info.get("module_exec"), "kernel_names", {}) or {}
        for kobj, mangled in list(names.items()):
            if kobj.key == k.kernel_key and k.forward_name.startswith(mangled + "_"):
                kernel = kobj
                break
        if kernel is None:
            continue
        out.append(kernel_signature(kernel, k.kernel_key, k.module_hash,
                                    first_launch.get((k.module_hash, k.kernel_key))))
    return out


def _export(graph, tmp: Path, inputs: Mapping, outputs: Mapping):
    """Save through Warp into ``tmp``, decode, and annotate.

    Returns:
        ``(program, mapped, modules)``: the annotated program (viewing
        ``mapped``) and ``{filename: bytes}`` of its module files.
    """
    if not getattr(graph, "apic", False) or getattr(graph, "_apic_capture", None) is None:
        raise WrpError("this graph was not captured with apic=True, so it cannot be saved",
                       hint="Capture with wrpkit.capture() or wp.capture_begin(apic=True).")
    _check_bindings(graph, inputs, outputs)
    stem = tmp / "capture"
    try:
        wp.capture_save(graph, os.fspath(stem), inputs=dict(inputs) or None, outputs=dict(outputs) or None)
    except RuntimeError as e:
        raise WrpRuntimeError(f"Warp could not save the graph: {e}") from None
    wrp_path = stem.with_suffix(".wrp")
    mapped = map_file(wrp_path, "capture", prefetch=True)  # all of it is written out again
    prog = wrp1.decode_wrp1(mapped.buffer)

    # Warp appends bindings on every save of the same graph; keep this save's.
    n = len(inputs) + len(outputs)
    prog.bindings = prog.bindings[len(prog.bindings) - n:] if n else []
    cap = graph._apic_capture
    regions = prog.region_map()
    sigs = {}
    for role, d in (("input", inputs), ("output", outputs)):
        for name, arr in d.items():
            if name in sigs:
                sigs[name] = records.replace(sigs[name], is_output=True)
                continue
            sigs[name] = signature_of_array(name, arr, _byte_offset(cap, arr), is_input=role == "input",
                                                is_output=role == "output")
    for b in prog.bindings:
        sig = sigs.get(b.name)
        region = regions.get(b.region_id)
        if sig is not None and region is not None:
            ann.check_fits(sig, region.size)

    mdir = modules_dir_for(wrp_path)
    modules = {}
    for mod in prog.modules:
        for fname in (mod.binary_filename, mod.source_filename):
            if fname and fname not in modules:
                modules[fname] = read_file(mdir / fname, "module file")
    digests = [ann.ModuleDigest.of(name, data) for name, data in modules.items()]
    from . import call_sites as cs  # noqa: PLC0415

    root = cs.program_root()  # kernel and call-site paths are relative to it
    sites = unrecorded = ()
    log = getattr(graph, "_wrpkit_call_sites", None)
    if log is not None:
        try:
            sites = cs.encode_sites(log, prog, root)[0]
            unrecorded = cs.encode_unrecorded(log, root)
        except Exception:  # noqa: BLE001 -- call sites are a help: a surprise must not stop the save
            sites = unrecorded = ()
    root_name = root.name
    prog.annotations = ann.encode_annotations(signature=list(sigs.values()),
                                              kernel_signatures=_kernel_signatures(graph, prog),
                                              module_digests=digests, call_sites=sites, source_root=root_name,
                                              unrecorded_calls=unrecorded)
    return prog, mapped, modules


def save(graph, path, inputs: Optional[Mapping] = None, outputs: Optional[Mapping] = None, *,
         lint: bool = True, allow_raw_pointers: bool = False) -> Path:
    """Save a graph captured with ``apic=True`` to a ``.wrp`` with typed signatures.

    The file is what ``wp.capture_save`` writes (stock ``wp.capture_load``
    loads it) plus wrpkit's annotations in an extra section.  The ``.wrp``
    and its ``<stem>_modules/`` are published atomically.

    Args:
        graph: A ``wp.Graph`` from ``wp.capture_end`` (captured with
            ``apic=True``), or a :class:`Recording`.
        path: Destination ``.wrp`` (``.wrp`` is appended when missing, as
            Warp does), or a ``.wrpk`` for one self-contained bundle (which
            wrpkit loads; stock Warp loads only ``.wrp``).
        inputs: ``{name: wp.array}`` bound as inputs.
        outputs: ``{name: wp.array}`` bound as outputs.
        lint: Issue a :class:`WrpLintWarning` for each pattern that saves but
            may not replay in another process (e.g. a HashGrid id passed as
            ``uint64``).  :meth:`Recording.save` turns it off: its capture
            was linted when it ended.
        allow_raw_pointers: Save anyway when a kernel argument holds a live
            process pointer (a replay in the capturing process still works;
            anywhere else it dereferences a dangling pointer, which
            ``wrp replay`` refuses unless told ``--allow-raw-pointers``).

    Returns:
        The path of the file written.

    Raises:
        WrpValidationError: A kernel argument holds a live process pointer and
            ``allow_raw_pointers`` is False: the message names the kernel and
            the argument, the hint the line to change (a Mesh id: declare the
            argument ``wp.handle``).  Nothing is written.
        WrpBindingError: A binding is not a wp.array on the graph's device, or
            one name is bound to two different arrays.
        WrpError: The graph cannot be saved.
    """
    if isinstance(graph, Recording):
        graph = graph._need_graph()
    dest = Path(os.fspath(path))
    bundle = dest.suffix == ".wrpk"
    if dest.suffix not in (".wrp", ".wrpk"):
        dest = dest.with_name(dest.name + ".wrp")
    parent = dest.parent if str(dest.parent) else Path(".")
    if not parent.is_dir():
        raise WrpError(f"output directory does not exist: {parent}", hint="Create it first.")
    with tempfile.TemporaryDirectory(prefix="wrpkit-save-") as d:
        prog, mapped, modules = _export(graph, Path(d), dict(inputs or {}), dict(outputs or {}))
        try:
            if not allow_raw_pointers:
                from ..load.prepare import refuse_raw_pointers  # noqa: PLC0415

                refuse_raw_pointers(prog)  # at save time, with the line to change, not at the replay elsewhere
            if bundle:
                from ...formats.wrpk.builder import write_wrpk  # noqa: PLC0415

                write_wrpk(dest, prog, modules)
            else:
                publish_wrp(dest, wrp1.iter_wrp1_chunks(prog), modules)
            if lint:
                warn_lints(prog)
        finally:
            del prog
            mapped.close()
    return dest


__all__ = ["capture", "begin_capture", "end_capture", "Recording", "save"]
