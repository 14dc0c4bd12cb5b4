"""Output paths made ready before any long work: parent folders created (and removed again when the
command fails), an output that is an input refused, the folder probed with a real file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Union

from .errors import WrpError, WrpIOError
from .io_errors import cannot_write, io_error, os_reason
from .special_outputs import check_special_output, special_output

#: A path as callers pass it.
PathLike = Union[str, os.PathLike]


def _probe_writable(d: Path, dest: Path) -> None:
    """Create and remove a temporary file in ``d``: the one honest test of writability.

    ``os.access`` answers yes to root on a read-only mount (sysfs, a
    read-only bind mount), so a real file is made instead.

    Raises:
        WrpIOError: ``d`` does not take new files (``dest`` is named in the message).
    """
    import tempfile  # noqa: PLC0415

    try:
        fd, name = tempfile.mkstemp(prefix=".wrpkit-probe-", dir=d)
    except OSError as e:
        raise cannot_write(dest, e) from None
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass


#: Folders :func:`make_parents` and :func:`make_folder` created in this process, oldest first: a command
#: that fails removes the ones still empty (:func:`remove_created_folders`), so that it leaves nothing behind.
_CREATED: list = []


def _is_dir(p: Path) -> bool:
    """``p.is_dir()`` that answers False where the path cannot be looked at (the caller's next step says why)."""
    try:
        return p.is_dir()
    except OSError:
        return False


def create_parents(path: PathLike):
    """:func:`make_parents`, also returning the folders it created (outermost first)."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if _is_dir(parent):
        return parent, []
    missing = []
    a = parent
    while True:
        try:
            os.lstat(a)
            break
        except FileNotFoundError:
            missing.append(a)
        except OSError:
            break
        if a.parent == a:
            break
        a = a.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        made = [m for m in reversed(missing) if _is_dir(m)]
        remove_empty_folders(made)
        hint = None
        for a in parent.parents:
            try:
                if a.exists() and not a.is_dir():
                    hint = f"{a} is a file, not a folder; write somewhere else."
                    break
            except OSError:
                break
        err = cannot_write(missing[-1] if missing else out, e)  # its hint names the nearest existing folder
        raise WrpIOError(f"cannot write {out}: cannot create folder {parent}: {os_reason(e)}",
                         hint=hint or err.hint) from None
    made = list(reversed(missing))
    _CREATED.extend(made)
    return parent, made


def make_parents(path: PathLike) -> Path:
    """Create the missing parent folders of an output, as ``cp``, ``tar`` and ``wrp convert`` do.

    The folders it creates are remembered: a command that then fails removes
    them again while they are empty (:func:`remove_created_folders`).

    Returns:
        The parent folder.

    Raises:
        WrpIOError: A folder cannot be created (read-only place, a file in the way).
    """
    return create_parents(path)[0]


def make_folder(path: PathLike, what: str = "folder") -> list:
    """Create the folder ``path`` and its missing parents unless it exists.

    Remembered as :func:`make_parents` remembers its folders.

    Returns:
        The folders created, outermost first (``path`` last); empty when it existed.

    Raises:
        WrpIOError: It cannot be created, or a file is in the way.
    """
    folder = Path(path)
    if _is_dir(folder):
        return []
    _, made = create_parents(folder)
    try:
        folder.mkdir()
    except FileExistsError:
        if _is_dir(folder):
            return made
        remove_empty_folders(made)
        raise WrpIOError(f"cannot create {what} {folder}: it is a file, not a folder", hint="Name a folder.") from None
    except OSError as e:
        remove_empty_folders(made)
        raise WrpIOError(f"cannot create {what} {folder}: {os_reason(e)}",
                         hint=cannot_write(folder, e).hint) from None
    _CREATED.append(folder)
    return made + [folder]


def remove_empty_folders(folders) -> None:
    """Remove each of ``folders`` (outermost first, as :func:`make_folder` lists them) that is empty, innermost
    first; never anything else."""
    for f in reversed(list(folders)):
        try:
            os.rmdir(f)
        except OSError:
            pass


def remove_created_folders() -> None:
    """Remove the folders this process created for outputs (:func:`make_parents`, :func:`make_folder`) that are
    still empty: what a command that failed calls, so that it leaves no empty folder behind."""
    made = list(_CREATED)
    del _CREATED[:]
    remove_empty_folders(made)


def check_output_path(path: PathLike, inputs: Iterable = (), *, modules_beside: bool = False) -> Path:
    """Make an output path ready before any long work: every command calls it first.

    Refuses an output that is one of the inputs, creates its missing parent
    folders and checks, with a real temporary file, that its folder takes
    new files.  An output that is a special file (:func:`~wrpkit.special_outputs.special_output`:
    a device, a FIFO, ``/dev/stdout``) is written in place, so its folder is
    not probed: it must be open for writing (or writable by this user).

    Args:
        path: The output file.
        inputs: Input paths it must not be.
        modules_beside: The output is a ``.wrp``, written with its
            ``<stem>_modules/`` beside it: a special file is refused.

    Returns:
        The output path.

    Raises:
        WrpError: The output is an input, or a directory.
        WrpUsageError: A ``.wrp`` output (``modules_beside``) names a special file (exit 2).
        WrpIOError: The folder cannot be created or written, or a special file cannot be written (exit 1).
    """
    out = Path(path)
    kind = special_output(out)
    if kind is not None:
        check_special_output(out, kind, modules_beside)
        return out
    for i in inputs:
        try:
            if out.exists() and os.path.samefile(out, i):
                raise WrpError(f"output {out} is the same file as input {i}")
        except OSError:
            pass
    if _is_dir(out):
        raise WrpError(f"output {out} is a directory", hint="Name a file inside it.")
    _probe_writable(make_parents(out), out)
    return out


def check_output_dir(path: PathLike) -> Path:
    """Check, before any long work, that a folder output can be written; create nothing.

    For outputs written only when the work succeeds (``wrp trace --dump``):
    the folder itself, or else its nearest existing ancestor, must take new
    files.  The folder is made later, when there is something to write.

    Raises:
        WrpIOError: The folder is a file, or the place cannot be written (exit 1).
    """
    out = Path(path)
    try:
        if out.exists() and not out.is_dir():
            what = special_output(out) or "a file"
            raise WrpIOError(f"cannot write {out}: it is {what}, not a folder", hint="Name a folder.")
        probe = out
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
    except OSError as e:
        raise io_error(e, out, "write") from None
    if not _is_dir(probe):
        raise WrpIOError(f"cannot create folder {out}: {probe} is a file, not a folder",
                         hint="Write somewhere else.")
    _probe_writable(probe, out)
    return out


__all__ = ["check_output_path", "check_output_dir", "make_parents", "create_parents", "make_folder",
           "remove_empty_folders", "remove_created_folders"]
