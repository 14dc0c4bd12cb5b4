"""Open a capture from disk, whatever its container, and reach its module files.

This is the one place that turns a path into a typed program: it maps the
file, sniffs its magic, hands the buffer to the right codec (:mod:`wrpkit.formats.wrp1`
for ``.wrp``, :mod:`wrpkit.formats.wrpk.reader` for ``.wrpk``) and knows where the module
binaries live (``<stem>_modules/`` beside a ``.wrp``, blobs inside a ``.wrpk``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable, Optional

from ..records import field, record
from . import wrp1
from .wrp1_limits import DEFAULT_LIMITS, Limits
from ..errors import WrpError, WrpFormatError, WrpIOError, WrpModuleError
from ..file_reads import MappedFile, map_file, read_file
from ..module_dirs import find_modules_dir, is_plain_basename, sibling_modules_dirs
from ..model import Program

def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:
        return False


#: Module file states reported by :meth:`Capture.module_state`.
PRESENT, MISSING, EMPTY, UNSAFE = "present", "missing", "empty", "unsafe"


@record
class Capture:
    """A decoded capture file and where its module binaries are.

    Attributes:
        path: The file.
        kind: ``"wrp"``, ``"wrpk"`` or ``"json"``.
        program: The decoded program.  Blob fields view ``mapped``.
        modules_dir: ``<stem>_modules/`` for a ``.wrp``; None for a ``.wrpk`` or ``.json``
            (their module files are on ``program.modules``).
        mapped: The read-only mapping the program views.
    """

    path: Path
    kind: str
    program: Program
    modules_dir: Optional[Path]
    mapped: MappedFile = field(repr=False)
    #: ``{file name: bytes}`` of the module files a signature check hashed (see ``trust`` of
    #: :func:`open_capture`): these are the bytes loaded, whatever happens to the files after.
    verified_modules: dict = field(default_factory=dict, repr=False)

    def module_state(self, filename: str) -> str:
        """``present``, ``missing``, ``empty`` or ``unsafe`` (a symlink, FIFO,
        directory or a name that is not a plain file name)."""
        return self.module_problem(filename)[0]

    def module_problem(self, filename: str) -> tuple:
        """``(state, message, hint)`` for one module file the graph names.

        ``state`` is one of :data:`PRESENT`, :data:`MISSING`, :data:`EMPTY`,
        :data:`UNSAFE`; ``message`` says why (empty for a present file) and
        ``hint`` how to fix that reason.  Hard links are accepted: the bytes
        are read once, checked, and exactly those bytes are loaded
        (``schema/VALIDATION-RULES.md``).

        Raises:
            WrpIOError: The file or its folder exists but cannot be looked at (a folder this
                user may not search): an I/O error (exit 1) naming it and the reason, not a
                broken module.
        """
        if not is_plain_basename(filename):
            return (UNSAFE, f"module file name {filename!r} is not a plain file name",
                    "The file names a module outside its modules folder; it was made by hand or tampered with. "
                    "Recapture it.")
        if self.modules_dir is None:
            data = self._bundled(filename)
            if data is None:
                return (MISSING, f"module file {filename!r} is not in {self.path}",
                        "Rebuild it from the original .wrp and its modules: `wrp convert X.wrp X.wrpk` "
                        "(or X.json, without --no-modules).")
            if not len(data):
                return (EMPTY, f"module file {filename!r} in the bundle {self.path} is empty",
                        "Rebuild the bundle from the original .wrp and its modules.")
            return PRESENT, "", ""
        where = self.modules_dir / filename
        try:
            st = os.lstat(where)
        except (FileNotFoundError, NotADirectoryError):
            if not _is_dir(self.modules_dir):
                return MISSING, f"module file {filename!r} is missing: there is no folder {self.modules_dir}", \
                    self._missing_dir_hint()
            return (MISSING, f"module file {filename!r} is missing from {self.modules_dir}",
                    "Copy the whole <stem>_modules/ folder along with the .wrp, or bundle both with "
                    "`wrp convert X.wrp X.wrpk`.")
        except OSError as e:
            raise WrpIOError(f"cannot read module file {where}: {e.strerror or e}",
                             hint=f"Give this user read and search access to {self.modules_dir}.") from None
        if stat.S_ISLNK(st.st_mode):
            return (UNSAFE, f"module file {where} is a symbolic link; module names come from inside the file, so "
                            "links there are not followed",
                    f"Replace the link with a copy of its target: cp --remove-destination \"$(readlink -f {where})\" "
                    f"{where}")
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else \
                "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
            return (UNSAFE, f"module file {where} is {kind}",
                    "Replace it with the module file from the folder capture_save wrote, or recapture.")
        if not st.st_size:
            return (EMPTY, f"module file {where} is empty (0 bytes)",
                    "Copy the module file again from where the capture was made, or recapture.")
        return PRESENT, "", ""

    def _missing_dir_hint(self) -> str:
        needed = self.program.required_module_files()
        others = sibling_modules_dirs(self.path, needed) if needed else []
        if others:
            return (f"{others[0]} beside it holds every module file this graph needs (was the .wrp renamed?): "
                    f"pass --modules-dir {others[0]}, or rename that folder to {self.modules_dir.name}.")
        return ("Copy the whole <stem>_modules/ folder along with the .wrp (or pass --modules-dir DIR), or bundle "
                "both with `wrp convert X.wrp X.wrpk`.")

    def module_bytes(self, filename: str):
        """The bytes of one module file the graph names, read once into memory.

        Raises:
            WrpModuleError: The file is missing, empty or unsafe, with its reason and a hint.
        """
        state, message, hint = self.module_problem(filename)
        if state != PRESENT:
            raise WrpModuleError(message, hint=hint)
        if self.modules_dir is None:
            return self._bundled(filename)
        if filename in self.verified_modules:
            return self.verified_modules[filename]
        data = read_file(self.modules_dir / filename, "module file")
        if not data:
            raise WrpModuleError(f"module file {self.modules_dir / filename} is empty (0 bytes)",
                                 hint="Copy the module file again from where the capture was made, or recapture.")
        return data

    def _bundled(self, filename: str):
        """A bundle's bytes for one module file it names (binary or source), or None."""
        for mod in self.program.modules:
            for name, data in ((mod.binary_filename, mod.binary), (mod.source_filename, mod.source)):
                if name == filename:
                    return data
        return None

    def module_files(self) -> dict:
        """``{binary_filename: bytes}`` of every module (and exported source) the graph names.

        Raises:
            WrpModuleError: One of them is missing, empty or unsafe.
        """
        out = {}
        for mod in self.program.modules:
            out[mod.binary_filename] = self.module_bytes(mod.binary_filename)
            if mod.source_filename:
                out[mod.source_filename] = self._source_bytes(mod)
        return out

    def load_files(self) -> dict:
        """``{file name: bytes}`` of what a load needs: every required module
        binary (:meth:`wrpkit.model.Program.required_module_files`) plus each
        exported ``.cu`` source that is present.

        Raises:
            WrpModuleError: A required binary is missing, empty or unsafe.
        """
        prog = self.program
        out = {name: self.module_bytes(name) for name in prog.required_module_files()}
        for name in prog.optional_module_files():
            if self.module_state(name) == PRESENT:
                out[name] = self.module_bytes(name)
        return out

    def _source_bytes(self, mod):
        if self.modules_dir is None:
            if mod.source is None:
                raise WrpModuleError(f"bundle carries no source for {mod.source_filename!r}")
            return mod.source
        return self.module_bytes(mod.source_filename)

    def close(self) -> None:
        self.mapped.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_capture(path, *, limits: Limits = DEFAULT_LIMITS, verify_checksums: bool = True,
                 prefetch: bool = False, deferred: Optional[list] = None, share_ops: bool = False,
                 on_regions: Optional[Callable[[list], None]] = None, modules_dir=None,
                 thorough: bool = False, trust=None) -> Capture:
    """Open and decode a ``.wrp``, ``.wrpk`` or ``.json`` capture.

    The container is chosen by the file's magic bytes, not its name.

    Args:
        path: The file.
        limits: Decoder caps.
        verify_checksums: For ``.wrpk``: verify every blob's SHA-256 (default).
            Skip only when the bundle is trusted and speed matters.
        prefetch: Map every page up front; for callers that read the whole
            file (see :func:`wrpkit.file_reads.map_file`).
        deferred: For ``.wrpk``: see :func:`wrpkit.formats.wrpk.reader.decode_wrpk`.
        share_ops, on_regions: For ``.wrp``: see :func:`wrpkit.formats.wrp1.decode_wrp1`
            (a ``.wrpk`` always decodes shared operation tables into shared objects).
        modules_dir: For ``.wrp``: the folder of module files, instead of
            ``<stem>_modules/`` beside the file (or beside a symlink's target).
            A ``.wrpk`` carries its own and refuses it.
        thorough: For ``.wrpk`` with ``verify_checksums``: also verify the whole
            digest of a blob that has chunk digests (see
            :func:`wrpkit.formats.wrpk.reader.decode_wrpk`).
        trust: A :class:`wrpkit.formats.signature.Trust`: the capture must be signed by one of
            its keys, checked on the file's bytes before they are decoded; the module files it
            hashed are the ones later read (:attr:`Capture.verified_modules`); a signed ``.wrpk``'s
            blob checksums are then not checked again (the signature's digest covers every byte).
            None: no check.

    ``path`` is the user's: a symbolic link to the file is followed.

    Returns:
        A :class:`Capture`; close it (or use ``with``) when done.

    Raises:
        WrpError: The path is missing or not a regular file.
        WrpFormatError: The bytes are not a valid capture; names field and offset.
        WrpSignatureError: ``trust`` was given and the capture is not signed by it, or changed.
    """
    p = Path(path)
    mapped = map_file(p, "capture", prefetch=prefetch, follow_symlinks=True)
    try:
        kind = wrp1.sniff(mapped.buffer)
        if kind != "wrp" and modules_dir is not None:
            raise WrpError(f"--modules-dir applies to a .wrp, but {p} is not one (a .wrpk or .json carries its "
                           "modules)", hint="Leave out --modules-dir for this file.")
        if kind != "wrp" and bytes(mapped.buffer[:64]).lstrip().startswith(b"{"):
            kind = "json"
        mods = _modules_dir(p, modules_dir) if kind == "wrp" else None
        verified = trust.verify(p, mapped.buffer, kind, mods) if trust is not None else {}
        if trust is not None:
            # The signed digest covers every byte of the file: the blob checksums would be a second
            # pass over the same bytes that proves nothing more.
            verify_checksums = False
        if kind == "wrp":
            prog = wrp1.decode_wrp1(mapped.buffer, limits=limits, share_ops=share_ops, on_regions=on_regions)
            return Capture(p, "wrp", prog, mods, mapped, verified)
        if kind == "json":
            return Capture(p, "json", _decode_json(p, mapped.buffer), None, mapped)
        if kind == "wrpk":
            from .wrpk import reader  # noqa: PLC0415  (a .wrpk's reader is only needed here)

            prog = reader.decode_wrpk(mapped.buffer, verify_checksums=verify_checksums, deferred=deferred,
                                      thorough=thorough)
            return Capture(p, "wrpk", prog, None, mapped)
        raise WrpFormatError(
            f"{p} is not a Warp capture: it starts with {bytes(mapped.buffer[:4])!r}, not b'WRP1' or b'WRPK'",
            hint="Pass a .wrp written by wp.capture_save or a .wrpk written by wrpkit.")
    except BaseException:
        mapped.close()
        raise


def _decode_json(path: Path, buf) -> Program:
    """A ``.json`` capture (:mod:`wrpkit.formats.jsonform`), its embedded module files on its modules."""
    from . import jsonform  # noqa: PLC0415

    try:
        prog, modules = jsonform.loads(bytes(buf))
    except WrpError:
        raise
    except (ValueError, UnicodeDecodeError) as e:
        raise WrpFormatError(f"{path} is not valid JSON: {e}") from None
    for mod in prog.modules:
        if mod.binary is None and mod.binary_filename in (modules or {}):
            mod.binary = modules[mod.binary_filename]
        if mod.source is None and mod.source_filename and mod.source_filename in (modules or {}):
            mod.source = modules[mod.source_filename]
    return prog


def _modules_dir(path: Path, given) -> Path:
    if given is None:
        return find_modules_dir(path)
    d = Path(given)
    if not d.is_dir():
        raise WrpModuleError(f"modules folder {d} " + ("does not exist" if not d.exists() else "is not a directory"),
                             hint="Pass the folder capture_save wrote beside the .wrp (<stem>_modules/).")
    return d


__all__ = ["Capture", "open_capture", "PRESENT", "MISSING", "EMPTY", "UNSAFE", "WrpError"]
