"""``wrp upgrade``: turn a capture of an older Warp into one the installed Warp loads.

The record rewriting is :mod:`wrpkit.formats.upgrade` (no Warp needed); this
module adds what needs the installed Warp: its version (Warp 1.19 loads only
captures that name its own version) and, for format 3, compiling the user's
kernels (``--kernels``) to replace Warp 1.13 objects it cannot call.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Optional, Sequence

from ...records import record
from ... import environment
from ... import model as m
from ...errors import WrpError, WrpFormatError, WrpKernelsError, WrpNotFoundError
from ...atomic_writes import publish_wrp
from ...file_reads import read_file
from ...io_errors import io_error
from ...module_dirs import modules_dir_for
from ...output_paths import check_output_path
from ...special_outputs import output_size
from ...formats import wrp1
from ...formats.annotations import Annotations, ModuleDigest, encode_annotations
from ...formats.container import open_capture
from ...formats.upgrade import COLLISION_POLICIES, ArgSpec, RebuiltKernel, UpgradeReport, upgrade_program
from ...formats.wrp1_layout import CURRENT_FORMAT, LAYOUTS
from ...formats.wrpk.reader import verify_annotations


@record
class UpgradeResult:
    """What :func:`upgrade` wrote.

    Attributes:
        src, dst: Input and output paths.
        report: The :class:`~wrpkit.formats.upgrade.UpgradeReport` (per-kernel routes, notes).
        form: ``"wrp"`` or ``"wrpk"``.
        bytes_written: Bytes written (capture and module files).
        module_files: Names of the module files written.
        already_current: ``src`` was already of the current format: nothing
            to upgrade (``report`` is None; ``dst`` was written only as a copy
            with ``copy_current``, else ``bytes_written`` is 0).
        capture_bytes: Bytes of the capture file alone (``dst``), without module files.
    """

    src: Path
    dst: Path
    report: Optional[UpgradeReport]
    form: str
    bytes_written: int
    module_files: list
    already_current: bool = False
    capture_bytes: int = 0


def installed_warp_version() -> str:
    """The installed ``warp-lang`` version, read from its metadata (Warp is not imported).

    Raises:
        WrpError: Warp is not installed.
    """
    found = environment.installed_warp_version()
    if found is None:
        raise WrpError("Warp (warp-lang) is not installed; `wrp upgrade` writes the format of the installed Warp",
                       hint="pip install warp-lang, then run the upgrade again.")
    return found


def import_kernels_file(path):
    """Import a user's ``.py`` file as Python runs a script, without running its main block.

    The file's folder is on ``sys.path`` while it runs (scripts import their
    siblings) and ``sys.argv`` is ``[path]``, as for ``python path`` with no
    arguments (a script that parses its arguments at import time does not see
    the caller's); its ``__name__`` is its file stem, never ``"__main__"``, so an
    ``if __name__ == "__main__":`` block does not run.  Kernels it defines are
    registered with Warp under that module name.

    Args:
        path: The ``.py`` file.

    Returns:
        The module object.

    Raises:
        WrpKernelsError: The file is missing, not Python, or raises while it is imported.
    """
    path = Path(path)
    if not path.is_file():
        raise WrpKernelsError(f"--kernels file not found: {path}", hint="Pass the .py file that defines the kernels.")
    name = path.stem if path.stem.isidentifier() else "_wrpkit_kernels_" + "".join(
        c if c.isalnum() else "_" for c in path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WrpKernelsError(f"--kernels {path} is not an importable Python file",
                              hint="Pass a .py file that defines the kernels.")
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    # As `python FILE` would see it: a script that reads sys.argv at import time must not see wrp's arguments.
    argv, sys.argv = sys.argv, [str(path)]
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # the user's code: any error (SystemExit too) is theirs, reported as such
        if previous is not None:
            sys.modules[name] = previous
        else:
            sys.modules.pop(name, None)
        if isinstance(e, KeyboardInterrupt):
            raise
        raise WrpKernelsError(f"importing --kernels {path} failed: {type(e).__name__}: {e}",
                              hint="Fix the file so that `python -c 'import runpy; runpy.run_path(FILE)'` "
                                   "runs it; its main block is not run.") from None
    finally:
        sys.argv = argv
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def module_kernels(module) -> list:
    """The Warp kernels a module defines: its top-level names, then any others Warp registered under it."""
    import warp as wp  # noqa: PLC0415

    from ..warp_bridge.internals import registered_module  # noqa: PLC0415

    found = [k for k in vars(module).values() if isinstance(k, wp.Kernel)]
    registered = registered_module(module.__name__)
    for k in (getattr(registered, "kernels", {}) or {}).values():
        if isinstance(k, wp.Kernel) and all(k is not f for f in found):
            found.append(k)
    return found


def kernel_arg_specs(k) -> tuple:
    """:class:`~wrpkit.formats.upgrade.ArgSpec` of each argument of a kernel, as the installed Warp packs it.

    Raises:
        WrpKernelsError: An argument whose C layout wrpkit cannot determine.
    """
    from ..capture.kernel_types import kernel_argument_types  # noqa: PLC0415

    args = []
    for a in kernel_argument_types(k):
        if a.problem is not None:
            raise WrpKernelsError(f"{a.problem} (kernel {k.key!r})",
                                  hint="Pass the kernels as the capture launched them; file an issue naming this type.")
        args.append(ArgSpec(a.name, a.is_array, a.size, a.alignment))
    return tuple(args)


def rebuild_kernels(paths: Sequence, device: str = "cpu") -> tuple:
    """Import Python modules and compile every Warp kernel in them with the installed Warp.

    Args:
        paths: ``.py`` files; each is imported under its file stem (the Warp
            module name a capture records).
        device: Device to compile for.

    Returns:
        ``(kernels, binaries)``: a list of
        :class:`~wrpkit.formats.upgrade.RebuiltKernel` and
        ``{binary_filename: path}`` of the compiled objects.

    Raises:
        WrpError: A file cannot be imported or compiled, or defines no kernel.
    """
    import warp as wp  # noqa: PLC0415

    from ..capture.kernel_types import kernel_argument_types  # noqa: PLC0415

    wp.init()
    kernels, binaries = [], {}
    for path in paths:
        module = import_kernels_file(path)
        found = module_kernels(module)
        if not found:
            raise WrpKernelsError(f"{path} defines no Warp kernel", hint="Pass the module that defines the kernels.")
        for k in found:
            for a in kernel_argument_types(k):
                if a.is_array and a.family != "array":
                    raise WrpError(f"argument {a.name} of kernel {k.key!r} is a wp.{a.family}, "
                                   "which Warp 1.13 captures could not hold")
            try:
                exe = k.module.load(device)
            except Exception as e:  # compilation errors come from Warp
                raise WrpError(f"compiling module {k.module.name} from {path} failed: {e}") from None
            if exe is None or not exe.binary_path:
                raise WrpError(f"Warp produced no object file for module {k.module.name}")
            mh = exe.module_hash.hex() if isinstance(exe.module_hash, bytes) else str(exe.module_hash)
            mangled = exe.get_kernel_mangled_name(k)
            options = k.module.options | k.options
            dev = "cuda" if str(device).startswith("cuda") else "cpu"
            fwd = f"{mangled}_{dev}_forward" if dev == "cpu" else f"{mangled}_cuda_kernel_forward"
            bwd = (f"{mangled}_{dev}_backward" if dev == "cpu" else f"{mangled}_cuda_kernel_backward") \
                if options.get("enable_backward", True) else ""
            args = kernel_arg_specs(k)
            filename = Path(exe.binary_path).name
            binaries[filename] = Path(exe.binary_path)
            # Warp 1.13 recorded kernel.options.get("block_dim", 256) in format 3.
            kernels.append(RebuiltKernel(k.key, mh, k.module.name, filename, fwd, bwd,
                                         int(k.options.get("block_dim", 256)), tuple(args)))
    return kernels, binaries


def _forward_symbol_finder(files: dict):
    from ...checks.elf import read_object  # noqa: PLC0415

    cache = {}

    def find(module: m.Module, kernel_key: str, backward: bool = False) -> Optional[str]:
        data = files.get(module.binary_filename)
        if data is None:
            return None
        info = cache.get(module.binary_filename)
        if info is None:
            info = cache[module.binary_filename] = read_object(data, module.binary_filename)
        suffix = "_cpu_backward" if backward else "_cpu_forward"
        hits = sorted(s for s in info.defined if s.startswith(kernel_key + "_") and s.endswith(suffix)
                      and len(s) == len(kernel_key) + 9 + len(suffix))
        return hits[0] if len(hits) == 1 else None

    return find


def output_form(path) -> str:
    """``"wrpk"`` for a ``.wrpk`` path, else ``"wrp"``."""
    return "wrpk" if str(path).lower().endswith(".wrpk") else "wrp"


def upgrade(src, dst, *, collision: str = "producer", kernels: Sequence = (), progress=None,
            durable: bool = True, copy_current: bool = False, trust=None) -> UpgradeResult:
    """Rewrite a capture of an older Warp (format 3, 10, 13 to 16) as format 18 for the installed Warp.

    Formats 10 to 16 keep their kernel objects (copied into ``<stem>_modules/``
    beside ``dst``); format 3 objects are never kept, its kernels are rebuilt
    from ``kernels`` by the installed Warp.  The output records a SHA-256 of
    every module file in wrpkit's annotations and is written atomically and
    durably (fsynced); it is validated before it is published (the checks
    run while the written data goes to disk), and one that would not
    validate leaves nothing behind.

    Args:
        src: The old ``.wrp`` (or ``.wrpk``).
        dst: Output path; ``.wrpk`` writes a bundle, anything else a ``.wrp``
            with ``<stem>_modules/``.
        collision: ``"producer"`` (default: replay what the producing Warp
            replayed) or ``"intent"`` for formats 3 and 10 kernel-key collisions.
        kernels: ``.py`` files defining the kernels (format 3 only).
        progress: Optional callable receiving byte counts as they are written.
        durable: False skips the fsyncs: the output is still validated and
            published atomically, but may be lost on a power failure, as a
            ``cp`` may (for batches that ``sync`` once at the end).
        copy_current: An input that is already current is copied to ``dst``
            (as ``wrp convert`` copies); without it nothing is written.  Either
            way it is no error, so a batch over mixed files runs through.

    Returns:
        An :class:`UpgradeResult`.

    Raises:
        WrpError: Format 3 without ``kernels``,
            a collision that cannot be resolved, or a result that would not
            validate.
        WrpFormatError: The input is not a valid capture.
    """
    from ...checks.module_files import check_module_symbols  # noqa: PLC0415
    from ...checks.validate import validate_program  # noqa: PLC0415

    src, dst = Path(src), Path(dst)
    if collision not in COLLISION_POLICIES:
        raise WrpError(f"unknown collision policy {collision!r}; choose one of {', '.join(COLLISION_POLICIES)}")
    try:
        if not src.exists():
            raise WrpNotFoundError(f"input not found: {src}", hint="Check the path.")
    except OSError as e:
        raise io_error(e, src, "read") from None
    check_output_path(dst, [src], modules_beside=output_form(dst) == "wrp")
    version = installed_warp_version()
    with open_capture(src, share_ops=True, prefetch=True, trust=trust) as cap:
        prog = cap.program
        if prog.format_version == CURRENT_FORMAT:
            if prog.warp_version != version:
                from ...errors import WrpVersionError  # noqa: PLC0415

                raise WrpVersionError(
                    f"{src} is format {CURRENT_FORMAT} but was recorded with Warp {prog.warp_version}, and the "
                    f"installed Warp is {version}: an upgrade cannot change that",
                    field="metadata.warp_version",
                    hint=f"Recapture it with Warp {version}, or install warp-lang=={prog.warp_version}.")
            form = output_form(dst)
            if not copy_current:
                return UpgradeResult(src, dst, None, form, 0, [], already_current=True)
            current = True
        else:
            current = False
    if current:
        from ...formats.convert import convert  # noqa: PLC0415

        res = convert(src, dst)
        mdir = modules_dir_for(dst)
        names = sorted(f.name for f in mdir.iterdir()) if form == "wrp" and mdir.is_dir() else []
        return UpgradeResult(src, dst, None, form, res.bytes_written, names, already_current=True,
                             capture_bytes=output_size(dst, res.bytes_written))
    with open_capture(src, share_ops=True, prefetch=True, trust=trust) as cap:
        prog = cap.program
        layout = LAYOUTS[prog.format_version]
        rebuilt, rebuilt_files = [], {}
        if layout.legacy_args:
            if kernels:
                rebuilt, rebuilt_files = rebuild_kernels(kernels, prog.device)
            files = {}
        else:
            if kernels:
                raise WrpError(f"--kernels applies to format 3 only; {src} is format {prog.format_version}, "
                               "whose kernel objects are kept")
            files = {}
            for mod in prog.modules:
                if cap.module_state(mod.binary_filename) == "present":
                    files[mod.binary_filename] = cap.module_bytes(mod.binary_filename)
            # Every module a kernel record uses must be there (as Warp's own loader requires).
            for name in prog.required_module_files():
                if name not in files:
                    cap.module_bytes(name)  # raises WrpModuleError naming the file and its state
        new, report = upgrade_program(prog, version, collision=collision, rebuilt=rebuilt,
                                      forward_symbol=_forward_symbol_finder(files))
        out_files = {}
        for mod in new.modules:
            name = mod.binary_filename
            if name in rebuilt_files:
                out_files[name] = read_file(rebuilt_files[name], "module")
            elif name in files:
                out_files[name] = files[name]
        notes = Annotations(f"wrp upgrade (from {report.source})",
                            module_digests=tuple(ModuleDigest.of(name, data) for name, data in out_files.items()))
        new.annotations = encode_annotations(notes)

        def check(fd: int) -> None:
            # Run once every byte is written and before anything is synced or
            # published (atomic_write's ``finish``), so that the checks run
            # while the disk writes the data back; raising abandons the
            # unnamed output.  The bytes are checked as wrp validate reads
            # them (structure) and the record they encode by its rules,
            # without decoding them again.
            verify_annotations(new.annotations)
            problems = [p for p in validate_program(new, annotations=notes) + check_module_symbols(new, out_files)
                        if getattr(p, "severity", "error") == "error"]
            if problems:
                raise WrpError("the upgraded capture would not validate, so nothing was written: "
                               + "; ".join(str(p) for p in problems[:5]),
                               hint="Report this with the input file; `wrp validate` on the input shows its state.")

        form = output_form(dst)
        if form == "wrpk":
            from ...formats.wrpk import builder  # noqa: PLC0415

            n = builder.write_wrpk(dst, new, out_files, progress, check, durable=durable)
        else:
            # With writeback hints (the default): the disk starts on the data
            # while the rest is written and checked (bench/bench_upgrade.py).
            n = publish_wrp(dst, wrp1.iter_wrp1_chunks(new), out_files, progress, check, durable=durable)
    return UpgradeResult(src, dst, report, form, n, sorted(out_files), capture_bytes=output_size(dst, n))


__all__ = ["upgrade", "UpgradeResult", "rebuild_kernels", "installed_warp_version", "WrpFormatError"]
