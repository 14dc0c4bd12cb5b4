"""Conversion between the forms of a capture: ``.wrp``, ``.wrpk`` and ``.json``.

The input form is recognized by its bytes, the output form by its extension.
Every output is written atomically: a failed conversion leaves no output
file behind and an existing one untouched.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Optional

from ..records import record
from . import wrp1
from .container import open_capture
from ..errors import WrpError, WrpFormatError, WrpModuleError, WrpNotFoundError, WrpUsageError
from ..atomic_writes import atomic_write, publish_wrp
from ..file_reads import map_file
from ..io_errors import io_error
from ..output_paths import check_output_path

#: Output forms by file extension.
FORMATS = {".wrp": "wrp", ".wrpk": "wrpk", ".json": "json"}


@record
class ConvertResult:
    """What :func:`convert` did."""

    source: Path
    destination: Path
    source_form: str
    destination_form: str
    bytes_written: int
    modules: int


def output_form(path) -> str:
    """The form an output path asks for, from its extension.

    Raises:
        WrpUsageError: The extension is not one of ``.wrp``, ``.wrpk``, ``.json`` (exit 2).
    """
    ext = Path(path).suffix.lower()
    if ext not in FORMATS:
        raise WrpUsageError(f"cannot tell the output format from {Path(path).name!r}",
                       hint="Use an output name ending in .wrp, .wrpk or .json.")
    return FORMATS[ext]


def _read_json(path: Path, meta: Optional[dict] = None):
    from . import jsonform  # noqa: PLC0415

    with map_file(path, "JSON capture", follow_symlinks=True) as mf:
        text = bytes(mf.buffer)
    try:
        return jsonform.loads(text, meta)
    except WrpError:
        raise
    except (ValueError, UnicodeDecodeError) as e:
        raise WrpFormatError(f"{path} is not valid JSON: {e}") from None


def _refuse_edited_extents(prog, known, src) -> None:
    """Refuse launches an edit of the JSON made run past every array they are given.

    A launch that already did so when the file was exported (listed in
    ``launch_extents_exceeded``) may be a guarded kernel and stays a lint.
    """
    from ..errors import WrpValidationError  # noqa: PLC0415
    from .launch_arrays import exceeded_launches, exceeded_message  # noqa: PLC0415

    known = set(known)
    new = [f"{w}: {exceeded_message(op, largest)}" for w, op, largest in exceeded_launches(prog.ops)
           if w not in known]
    if new:
        raise WrpValidationError(
            new, hint=f"An edit of {src} made these launches run more threads than their arrays hold (they did "
                      "not when it was exported): an unguarded kernel would read and write past its arrays. "
                      "Undo the edit, or shrink the launch to the arrays' size.")


def _sniff_json(path: Path) -> bool:
    with map_file(path, "input", follow_symlinks=True) as mf:
        head = bytes(mf.buffer[:64]).lstrip()
    return head.startswith(b"{")


def convert(src, dst, *, progress: Optional[Callable[[int], None]] = None, verify_checksums: bool = True,
            include_modules: bool = True, modules_dir=None,
            validate: Optional[Callable] = None, container_version: Optional[int] = None,
            trust=None) -> ConvertResult:
    """Convert a capture between ``.wrp``, ``.wrpk`` and ``.json``.

    The output's folder is created if needed.

    Args:
        src: Input file (a ``.wrp`` with its ``<stem>_modules/``, a ``.wrpk`` or a ``.json``).
        dst: Output path; its extension picks the form.  A ``.wrp`` output gets
            its ``<stem>_modules/`` folder written beside it.
        progress: Optional callable receiving byte counts as they are written.
        verify_checksums: Verify a ``.wrpk`` input's blob checksums.
        include_modules: Carry module binaries along (required for ``.wrp``
            and ``.wrpk`` outputs; optional for ``.json``).
        modules_dir: For a ``.wrp`` input: the folder of its module files
            (default ``<stem>_modules/`` beside it).
        validate: ``validate(program, modules) -> [problem texts]`` run on a
            ``.json`` input (an edit) and on any input converted to ``.json``
            before anything is written, so that both directions give one
            verdict; any problem refuses it (``wrp convert`` passes wrpkit's
            validator, which lives in a layer above this one).
        container_version: For a ``.wrpk`` output: its container version (default
            :data:`~.wrpk.tables.CONTAINER_VERSION`, 2; 1 for readers that know only 1).
        trust: A :class:`~wrpkit.formats.signature.Trust` the input must be signed by, or None.
            The output is a new file, unsigned.

    Returns:
        A :class:`ConvertResult`.

    Raises:
        WrpError: Unknown output extension, output equal to input, missing
            module files, or any decoding error of the input.
    """
    src, dst = Path(src), Path(dst)
    form = output_form(dst)
    if container_version is not None:
        from .wrpk.tables import CONTAINER_VERSIONS  # noqa: PLC0415

        if form != "wrpk" or container_version not in CONTAINER_VERSIONS:
            raise WrpUsageError(f"container version {container_version} applies to a .wrpk output and is one of "
                           f"{', '.join(map(str, CONTAINER_VERSIONS))}", hint="Drop the option, or write a .wrpk.")
    wrpk_version = {} if container_version is None else {"container_version": container_version}
    try:
        if not src.exists() and not src.is_symlink():
            raise WrpNotFoundError(f"input not found: {src}", hint="Check the path.")
    except OSError as e:
        raise io_error(e, src, "read") from None
    # `wrp convert x.wrpk out/x.wrp` creates out/, as cp and tar would (check_output_path does).
    check_output_path(dst, [src], modules_beside=form == "wrp")
    if form != "json":
        include_modules = True
    if _sniff_json(src):
        if trust is not None:
            from ..file_reads import read_file  # noqa: PLC0415

            trust.verify(src, read_file(src, "capture", follow_symlinks=True), "json", None)
        meta: dict = {}
        prog, modules = _read_json(src, meta)
        _refuse_edited_extents(prog, meta["launch_extents_exceeded"], src)
        src_form = "json"
        if validate is not None:
            from ..errors import WrpValidationError  # noqa: PLC0415

            problems = validate(prog, modules if include_modules else None)
            if problems:
                raise WrpValidationError(
                    problems, hint=f"An edit of {src} made it a file Warp would refuse or misread; nothing was "
                                   "written. Undo the edit, or fix what is named.")
        if include_modules and not modules and prog.modules:
            raise WrpModuleError(f"{src} carries no module binaries, so it cannot become a {form} file",
                           hint="Convert from a JSON file made with its modules embedded.")
        return _write(prog, modules if include_modules else None, src, dst, src_form, form, progress,
                      wrpk_version=wrpk_version)
    # Region checksums of a .wrpk input are verified while the output is
    # written, on a worker thread; the output is published only if they match.
    deferred = [] if form != "json" else None
    with contextlib.ExitStack() as stack:
        hasher = on_regions = None
        if form == "wrpk":
            from .wrpk.builder import BlobHasher  # noqa: PLC0415

            # A .wrp's region data is hashed while its ops are decoded.
            hasher = BlobHasher()
            on_regions = hasher.start_regions
        try:
            cap = open_capture(src, verify_checksums=verify_checksums, prefetch=True, deferred=deferred,
                               share_ops=True, on_regions=on_regions, modules_dir=modules_dir, trust=trust)
        except BaseException:
            if hasher is not None:
                hasher.close()
            raise
        stack.enter_context(cap)
        if hasher is not None:
            stack.enter_context(hasher)  # exits first: no hash still reads the input when it closes
        modules = cap.module_files() if include_modules else None
        if form == "json" and validate is not None:
            # The way back from .json validates the program (an edit may break it), so the way out
            # gives the same verdict: what converts to .json converts back (one verdict per file).
            from ..errors import WrpValidationError  # noqa: PLC0415

            problems = validate(cap.program, modules)
            if problems:
                raise WrpValidationError(
                    problems, hint=f"{src} breaks the rules `wrp validate` applies, so its .json could not be "
                                   "converted back; nothing was written. `wrp validate` lists every problem.")
        return _write(cap.program, modules, src, dst, cap.kind, form, progress, deferred, hasher, wrpk_version)


def _write(prog, modules, src, dst, src_form, form, progress, deferred=None, hasher=None,
           wrpk_version=None) -> ConvertResult:
    verification = finish = None
    if deferred:
        from .wrpk.blobs import BackgroundVerification  # noqa: PLC0415

        data = {r.region_id: r.data for r in prog.regions}
        verification = BackgroundVerification((d, data[d.region_id]) for d in deferred)

        def finish(fd: int) -> None:
            os.fsync(fd)  # the output goes to disk while the last hashes finish
            verification.wait()
    try:
        return _write_form(prog, modules, src, dst, src_form, form, progress, finish, hasher, wrpk_version or {})
    finally:
        if verification is not None:
            # Never leave the thread reading the input after it is closed.
            with contextlib.suppress(WrpError):
                verification.wait()


def _write_form(prog, modules, src, dst, src_form, form, progress, finish, hasher, wrpk_version) -> ConvertResult:
    if form == "wrp":
        n = publish_wrp(dst, wrp1.iter_wrp1_chunks(prog), modules or {}, progress, finish)
    elif form == "wrpk":
        from .wrpk import builder  # noqa: PLC0415

        n = builder.write_wrpk(dst, prog, modules, progress, finish, hasher, **wrpk_version)
    else:
        from . import jsonform  # noqa: PLC0415

        text = jsonform.dumps(prog, modules)
        data = text.encode("utf-8") if isinstance(text, str) else text
        n = atomic_write(dst, [data], progress, finish)
    return ConvertResult(src, dst, src_form, form, n, len(modules or {}))


def estimate_output_size(src) -> int:
    """Rough byte count a conversion of ``src`` writes (for progress bars); 0 where it cannot be looked at
    (the conversion itself then says why)."""
    p = Path(src)
    try:
        total = p.stat().st_size
        mdir = p.with_name(p.stem + "_modules")
        if mdir.is_dir():
            total += sum(f.stat().st_size for f in mdir.iterdir() if f.is_file())
    except OSError:
        return 0
    return total
