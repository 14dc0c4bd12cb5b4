"""Type a capture's kernels from the user's source (``--kernels FILE.py``, ``wrp annotate``).

A capture saved by stock ``wp.capture_save`` records each kernel's key, module
and packed arguments, but no types: tools cannot tell a float array from an
int one, or which arguments a kernel writes.  The user's own source can.  Each
``FILE.py`` is imported as Python runs a script (its folder on the import
path, but ``__name__`` is its stem, so its ``if __name__ == "__main__":``
block does not run; :func:`~wrpkit.run.load.upgrade.import_kernels_file`), and each
recorded kernel is matched, never guessed, by

* **key**: the kernel's name (``k.key``),
* **module**: the recorded module name, or ``__main__`` (a capture made by
  running the script records its kernels there), and
* **argument layout**: as many arguments, each an array where the capture
  relocates a pointer and of the packed size the capture holds
  (``wrp upgrade --kernels`` matches the same way).

A matched kernel becomes a :class:`~wrpkit.formats.annotations.KernelSignature`
(argument names, dtypes, and what the kernel does with each array, from
:mod:`wrpkit.run.capture.access`), the same record ``wrpkit.capture`` writes, so
every tool that reads kernel-argument annotations types the regions passed to
it.  A kernel that does not match is named with the reason.

Example::

    typing = type_from_source(program, annotations, ["sim.py"])
    typing.unmatched        # [KernelMatch(kernel_key="k", reason="...")]
    merged = typing.annotations
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, Sequence

from ... import records
from ...records import field, record
from ... import model as m
from ...binding_roles import binding_roles
from ...errors import WrpKernelsError
from ...formats import annotations as ann


@record
class KernelMatch:
    """How one recorded kernel was matched against the ``--kernels`` files.

    Attributes:
        kernel_key, module_hash, module_name: The recorded kernel.
        file: The file whose kernel matched, or None.
        signature: The :class:`~wrpkit.formats.annotations.KernelSignature`, or None.
        code: ``"same"`` (the kernel's own hash in the recorded symbol equals the
            file's), ``"changed"``, or ``"unknown"`` (not comparable).
        reason: Why it did not match (None when it did).
        kernel: The matched ``wp.Kernel`` (not serialised): what asks Warp more about it
            (``wrp memcheck``'s source lines) uses it instead of importing the file again.
    """

    kernel_key: str
    module_hash: str
    module_name: str
    file: Optional[str] = None
    signature: Optional[ann.KernelSignature] = None
    code: str = "unknown"
    reason: Optional[str] = None
    kernel: object = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        return {"kernel": self.kernel_key, "module": self.module_name, "module_hash": self.module_hash,
                "file": self.file, "matched": self.signature is not None, "code": self.code, "reason": self.reason}


@record
class SourceTyping:
    """What :func:`type_from_source` found.

    Attributes:
        files: The files imported.
        matches: One :class:`KernelMatch` per recorded kernel.
        annotations: The file's annotations (or empty ones) plus the matched
            kernel signatures and binding signatures derived from them.
        bindings_typed: Binding names that gained a signature.
        seconds: Wall time of importing and matching.
    """

    files: list
    matches: list = field(default_factory=list)
    annotations: Optional[ann.Annotations] = None
    bindings_typed: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def matched(self) -> list:
        return [k for k in self.matches if k.signature is not None]

    @property
    def unmatched(self) -> list:
        return [k for k in self.matches if k.signature is None]

    def to_json(self) -> dict:
        return {"files": [str(f) for f in self.files], "kernels": [k.to_json() for k in self.matches],
                "bindings_typed": list(self.bindings_typed), "seconds": round(self.seconds, 4)}


def _first_launches(program: m.Program) -> dict:
    """``{(module_hash, kernel_key): first forward launch}`` (the walk ends once every kernel is found)."""
    first: dict = {}
    want = len(program.kernels)
    for _, op in m.walk_ops(program.ops):
        if isinstance(op, m.KernelLaunch) and op.is_forward:
            first.setdefault((op.module_hash, op.kernel_key), op)
            if len(first) >= want:
                break
    return first


def _layout_problem(op: Optional[m.KernelLaunch], specs: tuple) -> Optional[str]:
    """Why a launch's packed arguments do not fit a kernel's arguments, or None when they fit."""
    if op is None:
        return None  # recorded but never launched forward: nothing to compare
    params = list(op.param_relocations())
    if len(params) != len(specs):
        return f"the capture passes {len(params)} argument(s), the file's kernel takes {len(specs)}"
    for i, ((p, relocs), spec) in enumerate(zip(params, specs)):
        if spec.is_array and not relocs:
            return f"argument {i} ({spec.name}) is an array in the file but a plain value in the capture"
        if p.value_size != spec.size:
            return (f"argument {i} ({spec.name}) is {p.value_size} bytes in the capture, {spec.size} in the "
                    "file's kernel")
    return None


def _kernel_hash(k, block_dim: int) -> Optional[str]:
    """The kernel's own hash as Warp puts it in its symbol name, or None when Warp cannot say."""
    try:
        k.module.get_module_hash(block_dim)
        h = k.module.hashers[block_dim].kernel_hashes[k]
        return k.get_mangled_name(kernel_hash=h)
    except Exception:  # noqa: BLE001  (private Warp API: the code check is a bonus)
        return None


def _factory_of(key: str) -> Optional[str]:
    """The function whose call makes kernel ``key`` (Warp names a kernel defined inside a function
    ``factory__locals__name``: ``make_scale__locals__apply``), or None for a module-level kernel."""
    head, sep, _ = key.partition("__locals__")
    return head if sep and head else None


def _module_fits(recorded: str, k, stem: str) -> bool:
    if recorded == "__main__":
        return True  # a capture made by running the script
    name = k.module.name
    return recorded == name or recorded.rsplit(".", 1)[-1] == stem


def import_kernels(paths: Sequence) -> list:
    """``[(path, [wp.Kernel, ...]), ...]``: each file imported as a script (main block not run).

    Raises:
        WrpKernelsError: A file is missing or fails to import.
    """
    from ..load.upgrade import import_kernels_file, module_kernels  # noqa: PLC0415

    out = []
    for path in paths:
        module = import_kernels_file(path)
        # Even a file that defines no kernel when imported is kept: its kernels may be made when its
        # code runs (a factory, the main block), and the matching says so per recorded kernel.
        out.append((Path(path), module_kernels(module)))
    return out


def type_from_source(program: m.Program, annotations: Optional[ann.Annotations], paths: Sequence) -> SourceTyping:
    """Match a capture's kernels with the kernels of the user's files; return the merged annotations.

    Kernel signatures the file already records are kept; a matched kernel
    adds its signature where the file has none.  Bindings without a
    signature get one when a matched kernel argument (or a struct's array
    field) covers their whole region: its dtype, with the shape the launch's
    array descriptor records, and the roles the binding list states
    (:func:`binding_signatures`).  Every argument type is the one Warp
    resolved (:func:`wrpkit.run.capture.kernel_types.kernel_argument_types`).

    Args:
        program: The decoded capture.
        annotations: Its annotations, or None (a stock capture).
        paths: The ``--kernels`` files.

    Returns:
        A :class:`SourceTyping`.

    Raises:
        WrpKernelsError: A file cannot be imported, or no recorded kernel matches any of
            them (each is named with its reason, and with the factory that makes it at run time
            where its key says so).
    """
    from ..warp_bridge.start import init_warp  # noqa: PLC0415
    from .kernel_types import kernel_argument_types  # noqa: PLC0415

    t0 = time.perf_counter()
    init_warp(cpu_only=program.device_type == m.DeviceType.CPU)
    imported = import_kernels(paths)
    mod_names = {mod.module_hash: mod.module_name for mod in program.modules}
    first = _first_launches(program)
    have = {(k.module_hash, k.kernel_key) for k in (annotations.kernel_signatures if annotations else ())}
    typing = SourceTyping([p for p, _ in imported])
    warp_types: dict = {}  # Warp's own resolved argument types of each matched kernel
    for rk in program.kernels:
        recorded = mod_names.get(rk.module_hash, "")
        match = KernelMatch(rk.kernel_key, rk.module_hash, recorded)
        typing.matches.append(match)
        cands = [(p, k) for p, ks in imported for k in ks if k.key == rk.kernel_key]
        if not cands:
            match.reason = f"no kernel named {rk.kernel_key!r} in " + ", ".join(
                str(p) if ks else f"{p}, which defines no kernel when imported" for p, ks in imported)
            factory = _factory_of(rk.kernel_key)
            if factory:
                match.reason += f"; it is made when {factory}() runs, and --kernels imports a file without running it"
            continue
        fits = [(p, k) for p, k in cands if _module_fits(recorded, k, p.stem)]
        if not fits:
            match.reason = (f"recorded in module {recorded!r}, but {cands[0][0]} defines it in module "
                            f"{cands[0][1].module.name!r}")
            continue
        op = first.get((rk.module_hash, rk.kernel_key))
        problems, good = [], []
        for p, k in fits:
            from ..load.upgrade import kernel_arg_specs  # noqa: PLC0415

            try:
                problem = _layout_problem(op, kernel_arg_specs(k))
            except WrpKernelsError as e:
                problem = e.message
            (problems if problem else good).append((p, k, problem))
        if not good:
            match.reason = problems[0][2]
            continue
        if len({tuple(a.type for a in k.adj.args) for _, k, _ in good}) > 1:
            match.reason = (f"{len(good)} definitions of {rk.kernel_key!r} fit its argument layout with different "
                            "types; pass only the file that defined it")
            continue
        p, k, _ = good[0]
        match.file, match.kernel = str(p), k
        from .access import kernel_signature  # noqa: PLC0415

        match.signature = kernel_signature(k, rk.kernel_key, rk.module_hash, op)
        if (rk.module_hash, rk.kernel_key) not in have:
            warp_types[(rk.module_hash, rk.kernel_key)] = kernel_argument_types(k)
        mangled = _kernel_hash(k, int(rk.block_dim) if rk.block_dim else 256)
        if mangled is not None and rk.forward_name:
            match.code = "same" if rk.forward_name.startswith(mangled + "_") else "changed"
    if not typing.matched:
        raise WrpKernelsError(
            "no kernel of the capture matches the --kernels file(s): "
            + "; ".join(list(dict.fromkeys(f"{k.kernel_key}: {k.reason}" for k in typing.matches))[:6]),
            hint=("Pass the .py file that defined and launched the kernels when the capture was made."
                  + (" A kernel a factory makes at run time is typed only by a capture made with "
                     "wrpkit.capture (it records every kernel's types), or by a --kernels file that calls "
                     "the factory when imported." if any(_factory_of(k.kernel_key) for k in typing.matches)
                     else "")))
    base = annotations or ann.Annotations(producer="wrpkit --kernels")
    added = tuple(k.signature for k in typing.matched if (k.module_hash, k.kernel_key) not in have)
    merged = records.replace(base, kernel_signatures=tuple(base.kernel_signatures) + added)
    sigs, typing.bindings_typed = binding_signatures(program, merged, warp_types)
    typing.annotations = records.replace(merged, signature=tuple(merged.signature) + tuple(sigs))
    typing.seconds = time.perf_counter() - t0
    return typing


def _annotation_slots(ks: ann.KernelSignature, param) -> tuple:
    """Array slots of one launch parameter as a kernel signature records them (top-level arrays only).

    A file's own kernel signatures (``wrpkit.capture``) name each array argument's dtype and ndim;
    a struct's array fields are recorded by C layout only, so they are left to Warp's own types.
    """
    from ...checks.summary import launch_argument  # noqa: PLC0415
    from .kernel_types import ArraySlot  # noqa: PLC0415

    arg = launch_argument(ks.arguments, param)
    if arg is None or arg.dtype is None or arg.dtype.fields or int(arg.ndim) <= 0:
        return ()
    family = "indexedarray" if str(arg.type).startswith("indexedarray") else "array"
    return (ArraySlot(arg.name, 0, family, int(arg.ndim), arg.dtype),)


def _descriptor_shape(op: m.KernelLaunch, param, desc, slot) -> Optional[tuple]:
    """``(shape, strides)`` the launch's descriptor records for an array slot, or None when it does not fit."""
    from ...formats.launch_arrays import descriptor_view  # noqa: PLC0415

    base = param.value_offset + desc.offset
    if base < 0 or base + desc.size > len(op.value_data):
        return None
    ndim, shape, strides = descriptor_view(op.value_data, base)
    if not 1 <= ndim <= 4 or (slot.ndim and ndim != slot.ndim) or any(d < 0 for d in shape[:ndim]):
        return None
    return tuple(int(d) for d in shape[:ndim]), tuple(int(x) for x in strides[:ndim])


def _covers(shape: tuple, strides: tuple, itemsize: int, size: int) -> bool:
    """Whether a C-contiguous ``shape``/``strides`` array of ``itemsize`` elements spans exactly ``size`` bytes."""
    expect = itemsize
    for d, st in zip(reversed(shape), reversed(strides)):
        if d > 1 and st != expect:
            return False
        expect *= d
    return expect == size


#: An indexedarray's index arrays are ``int32`` (``indexedarray_t.indices``).
_INDEX_DTYPE = ann.DataType("int32", ann.ScalarKind.INT32, (), 4)


def _index_arrays(op: m.KernelLaunch, param, desc, region_of: dict, sizes: dict, found: dict) -> int:
    """Type the index arrays of an ``indexedarray`` descriptor (``int32``, 1-D, as long as its own shape says);
    returns how many regions it typed whole."""
    from ...formats.launch_arrays import INDEXED_ARRAY_BYTES, index_counts  # noqa: PLC0415

    base = param.value_offset + desc.offset
    if base < 0 or base + INDEXED_ARRAY_BYTES > len(op.value_data):
        return 0
    counts = index_counts(op.value_data, base)
    typed = 0
    for k, rel in enumerate(desc.relocations[2:6]):
        rid = rel.region_id
        if rel.kind != m.RelocKind.DATA_PTR or rel.region_offset or rid not in region_of \
                or (found.get(rid) or (None, None))[1] is not None:
            continue
        n = int(counts[k])
        if n > 0 and n * 4 == sizes.get(rid, -1):
            found[rid] = (_INDEX_DTYPE, (n,), (4,))
            typed += 1
    return typed


def binding_signatures(program: m.Program, annotations: ann.Annotations, kernel_types: Optional[dict] = None) -> tuple:
    """``([ArraySignature], [name])`` for bindings without a signature that a typed kernel argument covers whole.

    Each binding gets the element dtype of the kernel argument (or struct array
    field) its region is passed as, with the dimensions and shape that the
    launch's own array descriptor records when that descriptor spans the whole
    region contiguously (a ``wp.array2d`` binding is typed 2-D); otherwise
    1-D over the whole region.  Roles are what the file's binding list says
    (:func:`wrpkit.binding_roles.binding_roles`); where it does not say, both.

    Args:
        program: The decoded capture.
        annotations: Its annotations with the kernel signatures to type from.
        kernel_types: ``{(module_hash, kernel_key): kernel_argument_types(kernel)}``,
            Warp's own resolved argument types (struct array fields included);
            kernels not in it are typed from their signature in ``annotations``.
    """
    from ...formats.launch_arrays import DescriptorLayoutError, argument_arrays  # noqa: PLC0415

    kernel_types = kernel_types or {}
    known = annotations.signature_map()
    region_of = {}
    # One per name (stock capture_save writes an in-place array twice, as an input and an
    # output), with the region Warp's loader resolves it to.
    for b in program.resolved_bindings():
        if b.name not in known:
            region_of.setdefault(b.region_id, []).append(b.name)
    if not region_of:
        return [], []
    sizes = {r.region_id: r.size for r in program.regions}
    by_key = {(k.module_hash, k.kernel_key): k for k in annotations.kernel_signatures}
    found: dict = {}  # region -> (dtype, shape, strides); shape None until a descriptor spans it whole
    whole = 0
    seen: set = set()
    for _, op in m.walk_ops(program.ops):
        if not isinstance(op, m.KernelLaunch) or id(op) in seen:
            continue
        seen.add(id(op))
        key = (op.module_hash, op.kernel_key)
        types = kernel_types.get(key)
        ks = by_key.get(key)
        if types is None and ks is None:
            continue
        for p, relocs in op.param_relocations():
            i = p.param_index - 1
            if types is not None:
                slots = types[i].arrays if 0 <= i < len(types) else ()
            else:
                slots = _annotation_slots(ks, p)
            slots = {sl.offset: sl for sl in slots if sl.family in ("array", "indexedarray")}
            if not slots:
                continue
            try:
                descs = list(argument_arrays(p, relocs))
            except DescriptorLayoutError:
                continue  # a malformed argument is the validator's to report
            for d in descs:
                sl = slots.get(d.offset)
                if sl is not None and d.indexed:
                    whole += _index_arrays(op, p, d, region_of, sizes, found)
                if sl is None or sl.dtype is None or sl.dtype.fields or sl.dtype.size <= 0:
                    continue
                # The array's data, and its gradient (``x.grad``, passed in the same descriptor: a
                # backward launch is often the only op that names a gradient binding), have the
                # argument's dtype and the descriptor's shape.
                for ptr in d.relocations[:2]:
                    if ptr.kind != m.RelocKind.DATA_PTR or ptr.region_offset or ptr.region_id not in region_of:
                        continue
                    rid = ptr.region_id
                    have = found.get(rid)
                    if have is not None and have[1] is not None:
                        continue
                    got = _descriptor_shape(op, p, d, sl)
                    if got is not None and _covers(got[0], got[1], int(sl.dtype.size), sizes.get(rid, -1)):
                        if have is None or have[0] == sl.dtype:
                            found[rid] = (sl.dtype, got[0], got[1])
                            whole += 1
                    elif have is None:
                        found[rid] = (sl.dtype, None, None)
        if whole == len(region_of):
            break  # every untyped binding has its shape: the rest of a long stream adds nothing
    roles = binding_roles([b.name for b in program.bindings])
    out, names = [], []
    for rid, (dt, shape, strides) in found.items():
        if shape is None:
            size = sizes.get(rid, 0)
            n = size // int(dt.size)
            if n * int(dt.size) != size:
                continue
            shape, strides = (n,), (int(dt.size),)
        for name in region_of[rid]:
            is_in, is_out = roles.get(name, (None, None))
            if is_in is None and is_out is None:
                # The binding list does not say (stock Warp records no roles): both, as --dtype types it.
                is_in = is_out = True
            out.append(ann.ArraySignature(name=name, dtype=dt, shape=shape, strides=strides,
                                          is_input=bool(is_in), is_output=bool(is_out)))
            names.append(name)
    return out, names


def retype(target, annotations: ann.Annotations) -> None:
    """Give a prepared capture (:class:`~wrpkit.run.load.prepare.Prepared`) new annotations, in memory.

    Sets its ``annotations``, the binding ``signature`` map, and the
    program's encoded annotations (what ``wrp inspect`` and ``wrp graph``
    read), so every tool downstream sees the types.  Nothing is written.
    """
    program = target.model
    target.annotations = annotations
    sig_map = annotations.signature_map()
    sizes = {r.region_id: r.size for r in program.regions}
    for b in program.resolved_bindings():
        sig = sig_map.get(b.name)
        if sig is not None and target.signature.get(b.name) is None:
            ann.check_fits(sig, sizes.get(b.region_id, 0))
            target.signature[b.name] = sig
    program.annotations = ann.encode_annotations(annotations)


def type_capture(target, kernels: Sequence) -> Optional[SourceTyping]:
    """:func:`type_from_source` on a prepared capture, then :func:`retype` it; None without ``kernels``."""
    if not kernels:
        return None
    typing = type_from_source(target.model, target.annotations, kernels)
    retype(target, typing.annotations)
    target.source_typing = typing
    return typing


def type_program(program: m.Program, kernels: Sequence) -> Optional[SourceTyping]:
    """Type a decoded program from ``--kernels`` files, in memory: its encoded annotations become the
    typed ones (what ``wrp inspect`` and ``wrp graph`` read); nothing is written.

    Returns:
        The :class:`SourceTyping`, or None without ``kernels``.

    Raises:
        WrpKernelsError: A file fails to import, or no kernel matches.
    """
    if not kernels:
        return None
    typing = type_from_source(program, ann.read_annotations(program), list(kernels))
    program.annotations = ann.encode_annotations(typing.annotations)
    return typing



@record
class AnnotateResult:
    """What :func:`annotate` wrote.

    Attributes:
        src, dst: Input and output paths.
        typing: The :class:`SourceTyping` (matches, unmatched kernels with reasons).
        bytes_written: Size of the capture written (module files excluded for a ``.wrp``).
    """

    src: Path
    dst: Path
    typing: SourceTyping
    bytes_written: int

    def to_json(self) -> dict:
        return {"source": str(self.src), "destination": str(self.dst), "bytes_written": self.bytes_written,
                **self.typing.to_json()}


def annotate(src, dst, kernels: Sequence) -> AnnotateResult:
    """Write a copy of a capture whose kernels and bindings are typed from the user's source.

    The copy holds wrpkit's annotations (kernel-argument signatures plus
    binding dtypes, :func:`type_from_source`) in the extra section that
    Warp's loader skips, so stock ``wp.capture_load`` loads and replays it
    exactly as the original; every other record and module file is the
    same.  The output is validated before it is published, atomically: a
    failure leaves nothing behind.

    Args:
        src: A ``.wrp`` or ``.wrpk`` without type annotations (a stock capture).
        dst: Output ``.wrp`` (with ``<stem>_modules/``) or ``.wrpk``.
        kernels: The ``.py`` files defining the kernels.

    Returns:
        An :class:`AnnotateResult`.

    Raises:
        WrpKernelsError: No ``kernels``, a file fails to import, no kernel
            matches, or ``src`` already carries type annotations.
        WrpFormatError, WrpValidationError, WrpModuleError: ``src`` is invalid.
        WrpError: Bad output path.
    """
    from ...checks.validate import validate_program  # noqa: PLC0415
    from ...atomic_writes import publish_wrp  # noqa: PLC0415
    from ...output_paths import check_output_path  # noqa: PLC0415
    from ...special_outputs import output_size  # noqa: PLC0415
    from ...formats import wrp1  # noqa: PLC0415
    from ..load.prepare import prepare  # noqa: PLC0415

    src, dst = Path(src), Path(dst)
    if not kernels:
        raise WrpKernelsError("wrp annotate needs --kernels FILE.py", hint="Pass the .py file that defines the kernels.")
    suffix = dst.suffix.lower()
    if suffix not in (".wrp", ".wrpk"):
        from ...errors import WrpUsageError  # noqa: PLC0415

        raise WrpUsageError(f"cannot write {dst}: the output must end in .wrp or .wrpk",
                       hint="For example -o typed.wrp (with typed_modules/) or -o typed.wrpk (one file).")
    check_output_path(dst, [src], modules_beside=suffix == ".wrp")
    prep = prepare(src)
    have = prep.annotations
    if have is not None and (have.kernel_signatures or have.signature):
        raise WrpKernelsError(
            f"{src} already carries type annotations ({len(have.kernel_signatures)} kernel signature(s), "
            f"{len(have.signature)} binding signature(s)); nothing was written",
            hint="Annotate the stock capture the file was made from, or use --kernels on the command instead.")
    typing = type_from_source(prep.model, have, kernels)
    files = dict(prep.modules)
    notes = typing.annotations
    if not notes.module_digests:  # pin the module files too, as a wrpkit capture does
        notes = records.replace(notes, module_digests=tuple(ann.ModuleDigest.of(n, d) for n, d in files.items()))
    typing.annotations = notes
    program = records.replace(prep.model, annotations=ann.encode_annotations(notes))
    problems = [p for p in validate_program(program, annotations=typing.annotations)
                if getattr(p, "severity", "error") == "error"]
    if problems:
        from ...errors import WrpError  # noqa: PLC0415

        raise WrpError("the annotated capture would not validate, so nothing was written: "
                       + "; ".join(str(p) for p in problems[:5]))
    if suffix == ".wrpk":
        from ...formats.wrpk import builder  # noqa: PLC0415

        n = builder.write_wrpk(dst, program, files)
    else:
        n = publish_wrp(dst, wrp1.iter_wrp1_chunks(program), files)
    return AnnotateResult(src, dst, typing, int(n if n is not None else output_size(dst, 0)))


__all__ = ["annotate", "AnnotateResult", "type_from_source", "type_capture", "type_program", "retype", "SourceTyping", "KernelMatch", "import_kernels",
           "binding_signatures"]
