"""A folder that replays captures on a machine without Python: ``wrp-replay`` plus Warp's runtime.

:func:`export_runtime` copies the C++ replayer and the two shared libraries
of the installed warp-lang (``warp.so``, ``warp-clang.so``) side by side,
with Warp's license and a README.  ``wrp-replay`` looks for ``warp.so`` in
its own directory first, so the folder runs wherever it is copied, with an
empty environment (``env -i``) and no Python installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Optional

from ...records import record
from ...errors import WrpError, WrpIOError, WrpNotFoundError
from ...atomic_writes import atomic_write
from ...file_reads import map_file, read_file
from ...io_errors import io_error
from ...output_paths import make_folder, remove_empty_folders

#: Warp's shared libraries ``wrp-replay`` loads (CPU graphs need both).
WARP_LIBRARIES = ("warp.so", "warp-clang.so")


@record
class ExportResult:
    """What :func:`export_runtime` wrote.

    Attributes:
        directory: The folder.
        files: Names of the files written, in the folder.
        warp_version: Version of the warp-lang the libraries come from.
        bytes_written: Total bytes.
    """

    directory: Path
    files: list
    warp_version: str
    bytes_written: int


def installed_warp_bin() -> Path:
    """warp-lang's ``warp/bin`` directory, found without importing Warp.

    Raises:
        WrpError: warp-lang is not installed or its libraries are missing.
    """
    from .engines import native_paths  # noqa: PLC0415

    found = native_paths().warp_lib_dir
    if found is None:
        raise WrpError("warp-lang is not installed in this Python", hint="pip install warp-lang==1.19.0")
    return Path(found)


def _warp_version() -> str:
    from ...environment import installed_warp_version  # noqa: PLC0415

    return installed_warp_version() or "unknown"


def _license_file() -> Optional[Path]:
    """warp-lang's LICENSE.md from its dist-info, if the install has one."""
    try:
        from importlib.metadata import distribution  # noqa: PLC0415

        for f in distribution("warp-lang").files or ():
            if f.name == "LICENSE.md" and "licenses" in f.parts[:-1] and len(f.parts) <= 3:
                p = Path(f.locate())
                if p.is_file():
                    return p
    except Exception:  # noqa: BLE001  (the license copy is a courtesy; the folder works without it)
        return None
    return None


def _readme(warp_version: str, replayer: str) -> str:
    return f"""wrp-replay: replay NVIDIA Warp captured graphs without Python
==============================================================

This folder runs as it is, wherever it is copied, on a Linux machine of the
same architecture with a C/C++ runtime (glibc, libstdc++) no older than the
one it was built on.  No Python is needed.

  {replayer}       the replayer (wrpkit)
  warp.so          Warp {warp_version}'s runtime
  warp-clang.so    Warp {warp_version}'s CPU code loader (needed for CPU graphs)
  LICENSE-warp.md  Warp's license, when the install carried one

wrp-replay finds warp.so in its own directory first (then --warp-lib-dir,
$WRP_WARP_LIB_DIR override it).  Captures must be recorded with Warp
{warp_version}: Warp loads only captures of its own version.

Examples:
  ./wrp-replay sim.wrp --list                          bindings, no Warp loaded
  ./wrp-replay sim.wrp --input x=x.npy --output y=y.npy
  ./wrp-replay sim.wrpk --repeat 1000 --warmup 10 --json
  ./wrp-replay --help                                   every option, exit codes

A .wrp needs its <stem>_modules/ folder beside it; a .wrpk bundle carries
its modules inside (make one with: wrp convert sim.wrp sim.wrpk).
"""


def export_runtime(dest, replayer, warp_bin=None, *, overwrite: bool = False) -> ExportResult:
    """Write a folder with ``wrp-replay``, Warp's ``warp.so`` and ``warp-clang.so``, and a README.

    Args:
        dest: The folder to write; created with its missing parents.
        replayer: Path of the ``wrp-replay`` executable to copy.
        warp_bin: warp-lang's ``warp/bin`` directory; default: the installed
            warp-lang's.
        overwrite: Replace files of the same names in an existing non-empty
            folder; without it such a folder is refused.

    Returns:
        An :class:`ExportResult`.

    Raises:
        WrpNotFoundError: The replayer or a Warp
            library does not exist.
        WrpError: ``dest`` is a file, or a non-empty folder without
            ``overwrite``.
        WrpIOError: A file cannot be written.
    """
    dest = Path(dest)
    replayer = Path(replayer)
    warp_bin = Path(warp_bin) if warp_bin is not None else installed_warp_bin()
    sources = {replayer.name: replayer}
    for lib in WARP_LIBRARIES:
        sources[lib] = warp_bin / lib
    for name, src in sources.items():
        if not src.is_file():
            raise WrpNotFoundError(f"{name} not found: {src}",
                                   hint="Reinstall warp-lang (pip install warp-lang==1.19.0)." if name != replayer.name
                                   else "Build wrpkit with `pip install .`, which builds wrp-replay.")
    try:
        if dest.exists() and not dest.is_dir():
            raise WrpError(f"{dest} exists and is not a directory")
        if dest.is_dir() and any(dest.iterdir()) and not overwrite:
            raise WrpError(f"{dest} is not empty", hint="Pass an empty or new folder, or --overwrite.")
    except OSError as e:
        raise io_error(e, dest, "create folder") from None
    version = _warp_version()
    lic = _license_file()
    # `wrp export-runtime dist/replayer` on a fresh tree makes dist/ too, as cp -r would.
    made = make_folder(dest)
    # Every file is written into a private folder inside DEST first, then all are renamed into
    # place: a failure (a full disk) leaves DEST as it was, and a DEST this call made is removed.
    stage = dest / f".wrpkit-export.{os.getpid()}.{os.urandom(4).hex()}"
    written = 0
    files = []

    def put(name: str, chunks) -> None:
        nonlocal written
        try:
            written += atomic_write(stage / name, chunks)
        except WrpIOError as e:  # named as the user knows it: DEST/NAME, not the private folder
            raise WrpIOError(e.message.replace(str(stage), str(dest)),
                             hint=e.hint.replace(str(stage), str(dest)) if e.hint else None) from None
        files.append(name)

    try:
        try:
            stage.mkdir()
        except OSError as e:
            raise io_error(e, dest, "write") from None
        for name, src in sources.items():
            with map_file(src, name) as mf:
                put(name, [mf.buffer])
        os.chmod(stage / replayer.name, 0o755)
        if lic is not None:
            put("LICENSE-warp.md", [read_file(lic, "Warp's license")])
        put("README.txt", [_readme(version, replayer.name).encode()])
        for name in files:
            try:
                os.replace(stage / name, dest / name)
            except OSError as e:
                raise io_error(e, dest / name, "write") from None
    except BaseException:
        if made:  # a folder this call made: nothing of it stays
            for name in files:
                with contextlib.suppress(OSError):
                    os.unlink(dest / name)
        shutil.rmtree(stage, ignore_errors=True)
        remove_empty_folders(made)
        raise
    shutil.rmtree(stage, ignore_errors=True)
    return ExportResult(dest, files, version, written)


__all__ = ["export_runtime", "ExportResult", "installed_warp_bin", "WARP_LIBRARIES"]
