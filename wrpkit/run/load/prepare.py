"""Preparation: decode, validate and check a capture before any Warp runtime is involved.

:func:`prepare` decodes and validates a ``.wrp`` or ``.wrpk`` with wrpkit's own
codec, checks that it can run here (device family, Warp version, module files
present, unaltered and non-empty) and returns a :class:`Prepared`.  Nothing here
imports Warp at module level: the native engine, the contained replay's parent
and ``wrp regress`` share it without loading Warp.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from ...records import field, record
from ...formats import annotations as ann
from ...formats import wrp1
from ...formats.signature import ENVIRONMENT, Trust
from ...formats.wrp1_layout import CURRENT_FORMAT, upgrade_message
from ...environment import installed_warp_version, parse_device
from ...errors import (
                       WrpBindingError,
                       WrpDeviceError,
                       WrpError,
                       WrpFormatError,
                       WrpModuleError,
                       WrpUsageError,
                       WrpValidationError,
                       WrpVersionError,
                       )
from ...apic_types import DeviceType


@record
class Prepared:
    """A decoded, validated capture that is ready to load on a device.

    Attributes:
        model: The program (:class:`wrpkit.model.Program`).
        wrp_bytes: The WRP1 bytes to hand to Warp: a view of the mapped file
            for a ``.wrp``; None for a ``.wrpk`` or ``.json`` until
            :meth:`image` re-encodes it (only a load in this process does).
        modules: ``{filename: bytes}`` of every module file the graph names.
        path: The source file, or None when loaded from bytes.
        kind: ``"wrp"``, ``"wrpk"`` or ``"json"``.
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
        """The WRP1 bytes Warp loads: :attr:`wrp_bytes`, encoded from the model the first time.

        A ``.wrpk``'s image maps the bundle's region data pages rather than copying them
        (:func:`wrpkit.run.load.mapped_image.build_mapped_image`), so that loading it holds one
        copy of the data (Warp's), as loading a ``.wrp`` does.
        """
        if self.wrp_bytes is None:
            if self.kind == "wrpk":
                from .mapped_image import build_mapped_image  # noqa: PLC0415

                self.wrp_bytes = build_mapped_image(self.model)[0]
            else:
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
            allow_raw_pointers: bool = False, _validated: bool = False, modules_dir=None,
            prefetch: bool = True, trust=ENVIRONMENT) -> Prepared:
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
        _validated: Internal (:mod:`wrpkit.run.contain.worker`): ``source`` is a
            private copy of bytes this process's parent already validated, so
            the validation rules are not applied again.
        verify_checksums: For ``.wrpk``: verify every blob's SHA-256.
        modules_dir: For a ``.wrp`` path: the folder of its module files,
            instead of ``<stem>_modules/`` beside it.
        prefetch: For a path: map every page of the file up front, because
            this process reads all of it (a load here).  False where a child
            maps the file itself and this process reads only its records.

    A path may be a symbolic link (followed; the modules folder is looked for
    beside the link, then beside its target) or a stem without ``.wrp``.

    Raises:
        WrpFormatError: The bytes are not a valid capture.
        WrpValidationError: The program breaks a validation rule, or holds
            raw process pointers (without ``allow_raw_pointers``).
        WrpModuleError: A module file is missing, empty or altered.
        WrpSignatureError: ``trust`` requires a signature this capture lacks, or it changed after signing.
    """
    is_path = isinstance(source, (str, os.PathLike))
    if trust is ENVIRONMENT:
        trust = Trust.from_environment() if is_path else None
    if trust is not None and not is_path:
        raise WrpUsageError("a capture given as bytes cannot be checked against its signature",
                            hint="Pass the capture's path (its signature and module files are beside it).")
    if trust is not None and modules is not None:
        raise WrpUsageError("module files given in memory cannot be checked against the capture's signature",
                            hint="Leave out modules=: the signed module files are read from the capture's folder.")
    keep = []
    path = None
    modules_given = modules is not None
    # Region-data checksums of a .wrpk are verified on the WRP1 image this
    # function builds (see Prepared.deferred), while Warp loads it.
    deferred = []
    if isinstance(source, (str, os.PathLike)):
        from ...formats.container import open_capture  # noqa: PLC0415

        path = resolve_capture_path(source)
        cap = open_capture(path, verify_checksums=verify_checksums, prefetch=prefetch, deferred=deferred,
                           modules_dir=modules_dir, trust=trust)
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
            from ...formats.wrpk import reader  # noqa: PLC0415

            model = reader.decode_wrpk(buf, verify_checksums=verify_checksums, deferred=deferred)
            wrp_bytes = None
        else:
            raise WrpFormatError(f"the data is not a Warp capture: it starts with {bytes(buf[:4])!r}",
                                 hint="Pass the bytes of a .wrp written by wp.capture_save or a .wrpk.")
        keep.append(source)
        files = None
        if modules is None:
            if kind == "wrpk":
                from ...formats.wrpk.builder import module_files  # noqa: PLC0415

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
    from ...checks.module_files import check_module_digests, check_module_symbols  # noqa: PLC0415
    from ...checks.validate import validate_program  # noqa: PLC0415

    problems = [] if _validated else [p for p in validate_program(model)
                                       if getattr(p, "severity", "error") == "error"]
    if problems:
        raise WrpValidationError([str(p) for p in problems],
                                 hint="Run `wrp validate` on the file for the full list.")

    if not allow_raw_pointers and not _validated:
        refuse_raw_pointers(model)

    annotations = ann.read_annotations(model)
    digest_problems = [] if annotations is None else check_module_digests(model, files, annotations)
    if digest_problems:
        raise WrpModuleError(digest_problems[0].message,
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
    from ...checks.check import RAW_POINTER_HINT, raw_pointer_findings  # noqa: PLC0415

    found = raw_pointer_findings(model)
    if found:
        raise WrpValidationError(
            [f.message for f in found],
            hint=RAW_POINTER_HINT)


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
    import numpy as np  # noqa: PLC0415

    if type(value).__module__.startswith("warp"):
        from warp.types import is_array  # noqa: PLC0415

        if is_array(value):
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


def captured_bytes(region) -> "np.ndarray":
    """A region's bytes as captured: a read-only ``uint8`` view of the file's data, or zeros where the
    file holds none (or the program let go of it)."""
    import numpy as np  # noqa: PLC0415

    if region.has_initial_data and region.data is not None:
        return np.frombuffer(region.data, dtype=np.uint8, count=region.size)
    return np.zeros(region.size, dtype=np.uint8)


def warp_data_type(name: str, type_name: str) -> ann.DataType:
    """The element type a ``--dtype NAME=TYPE`` names, as the installed Warp defines it.

    Warp's own type objects say what a name means (``vec3`` is ``vec3f``);
    :func:`wrpkit.checks.region_types.user_dtype_signatures` then types the
    binding with it, ``--dtype`` being region typing's strongest source.

    Args:
        name: Binding name (for the message).
        type_name: A Warp type name: ``float32``, ``int32``, ``vec3f``,
            ``mat33d``, ``quatf``, ``transformf``, ...

    Raises:
        WrpBindingError: ``type_name`` is not a Warp data type.
    """
    import warp as wp  # noqa: PLC0415

    from ..warp_bridge.dtypes import dtype_from_warp  # noqa: PLC0415

    t = getattr(wp, type_name, None) if type_name.isidentifier() and not type_name.startswith("_") else None
    try:
        dt = dtype_from_warp(t) if t is not None else None
        ann.element_layout(dt) if dt is not None else None
    except (TypeError, WrpError):
        dt = None
    if dt is None or dt.size <= 0:
        raise WrpBindingError(f"--dtype {name}={type_name}: {type_name!r} is not a Warp data type",
                              hint="Use a Warp type name such as float32, int32, vec3f, mat33f, quatf.")
    return dt


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


def release(prepared) -> None:
    """Close the mappings a prepared capture keeps alive (best effort: closing never fails a caller)."""
    for k in prepared._keep:
        close = getattr(k, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001
                pass
