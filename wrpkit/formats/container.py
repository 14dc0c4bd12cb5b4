"""Open a capture from disk, whatever its container, and reach its module files.

This is the one place that turns a path into a typed program: it maps the
file, sniffs its magic, hands the buffer to the right codec (:mod:`wrpkit.formats.wrp1`
for ``.wrp``, :mod:`wrpkit.formats.wrpk` for ``.wrpk``) and knows where the module
binaries live (``<stem>_modules/`` beside a ``.wrp``, blobs inside a ``.wrpk``).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from . import wrp1
from ..errors import WrpError, WrpFormatError, WrpModuleError
from ..fileio import MappedFile, is_plain_basename, map_file, modules_dir_for, read_file
from ..model import Program

#: Module file states reported by :meth:`Capture.module_state`.
PRESENT, MISSING, EMPTY, UNSAFE = "present", "missing", "empty", "unsafe"


@dataclass
class Capture:
    """A decoded capture file and where its module binaries are.

    Attributes:
        path: The file.
        kind: ``"wrp"`` or ``"wrpk"``.
        program: The decoded program.  Blob fields view ``mapped``.
        modules_dir: ``<stem>_modules/`` for a ``.wrp``; None for a ``.wrpk``.
        mapped: The read-only mapping the program views.
    """

    path: Path
    kind: str
    program: Program
    modules_dir: Optional[Path]
    mapped: MappedFile = field(repr=False)

    def module_state(self, filename: str) -> str:
        """``present``, ``missing``, ``empty`` or ``unsafe`` (a symlink, FIFO,
        directory or a name that is not a plain file name)."""
        if not is_plain_basename(filename):
            return UNSAFE
        if self.modules_dir is None:
            data = self._bundled(filename)
            if data is None:
                return MISSING
            return PRESENT if len(data) else EMPTY
        p = self.modules_dir / filename
        try:
            st = os.lstat(p)
        except OSError:
            return MISSING
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            return UNSAFE
        return PRESENT if st.st_size else EMPTY

    def module_bytes(self, filename: str):
        """The bytes of one module file the graph names.

        Raises:
            WrpModuleError: The file is missing, empty or unsafe, with a hint.
        """
        state = self.module_state(filename)
        if state != PRESENT:
            where = self.modules_dir if self.modules_dir is not None else self.path
            hint = ("Copy the whole <stem>_modules/ folder along with the .wrp, or bundle both with "
                    "`wrp convert X.wrp X.wrpk`." if self.modules_dir is not None else
                    "Rebuild the bundle from the original .wrp and its modules.")
            raise WrpModuleError(f"module file {filename!r} is {state} in {where}", hint=hint)
        if self.modules_dir is None:
            return self._bundled(filename)
        return read_file(self.modules_dir / filename, "module file")

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


def open_capture(path, *, limits: wrp1.Limits = wrp1.DEFAULT_LIMITS, verify_checksums: bool = True,
                 prefetch: bool = False, deferred: Optional[list] = None, share_ops: bool = False,
                 on_regions: Optional[Callable[[list], None]] = None) -> Capture:
    """Open and decode a ``.wrp`` or ``.wrpk`` file.

    The container is chosen by the file's magic bytes, not its name.

    Args:
        path: The file.
        limits: Decoder caps.
        verify_checksums: For ``.wrpk``: verify every blob's SHA-256 (default).
            Skip only when the bundle is trusted and speed matters.
        prefetch: Map every page up front; for callers that read the whole
            file (see :func:`wrpkit.fileio.map_file`).
        deferred: For ``.wrpk``: see :func:`wrpkit.formats.wrpk.decode_wrpk`.
        share_ops, on_regions: For ``.wrp``: see :func:`wrpkit.formats.wrp1.decode_wrp1`
            (a ``.wrpk`` always decodes shared operation tables into shared objects).

    Returns:
        A :class:`Capture`; close it (or use ``with``) when done.

    Raises:
        WrpError: The path is missing or not a regular file.
        WrpFormatError: The bytes are not a valid capture; names field and offset.
    """
    p = Path(path)
    mapped = map_file(p, "capture", prefetch=prefetch)
    try:
        kind = wrp1.sniff(mapped.buffer)
        if kind == "wrp":
            prog = wrp1.decode_wrp1(mapped.buffer, limits=limits, share_ops=share_ops, on_regions=on_regions)
            return Capture(p, "wrp", prog, modules_dir_for(p), mapped)
        if kind == "wrpk":
            from . import wrpk  # noqa: PLC0415  (the FlatBuffers runtime is only needed here)

            prog = wrpk.decode_wrpk(mapped.buffer, verify_checksums=verify_checksums, deferred=deferred)
            return Capture(p, "wrpk", prog, None, mapped)
        raise WrpFormatError(
            f"{p} is not a Warp capture: it starts with {bytes(mapped.buffer[:4])!r}, not b'WRP1' or b'WRPK'",
            hint="Pass a .wrp written by wp.capture_save or a .wrpk written by wrpkit.")
    except BaseException:
        mapped.close()
        raise


__all__ = ["Capture", "open_capture", "PRESENT", "MISSING", "EMPTY", "UNSAFE", "WrpError"]
