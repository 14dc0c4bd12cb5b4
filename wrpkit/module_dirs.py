"""Where a ``.wrp``'s module files are: its ``<stem>_modules/`` folder, and which names may be in it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Union

#: A path as callers pass it.
PathLike = Union[str, os.PathLike]


def modules_dir_for(path: PathLike) -> Path:
    """``<stem>_modules`` beside a ``.wrp`` path, as Warp names it."""
    p = Path(path)
    return p.with_name(p.stem + "_modules")


def find_modules_dir(path: PathLike) -> Path:
    """The modules folder of a ``.wrp`` the user named.

    ``<stem>_modules/`` beside ``path``; when ``path`` is a symbolic link and
    there is no such folder beside the link, the one beside its target.  A
    symbolic link to the folder is followed (the path is the user's).

    Returns:
        The first candidate that is a directory, else the one beside ``path``.
    """
    first = modules_dir_for(path)
    if first.is_dir() or not os.path.islink(path):
        return first
    beside_target = modules_dir_for(os.path.realpath(path))
    return beside_target if beside_target.is_dir() else first


def sibling_modules_dirs(path: PathLike, needed: Iterable) -> list:
    """Other ``*_modules/`` folders beside ``path`` that hold every file in ``needed``.

    Used to name the folder of a ``.wrp`` that was renamed without its modules.
    """
    p = Path(path)
    needed = [n for n in needed if is_plain_basename(n)]
    if not needed:
        return []
    own = modules_dir_for(p).name
    out = []
    try:
        entries = sorted(p.parent.iterdir()) if str(p.parent) else sorted(Path(".").iterdir())
    except OSError:
        return []
    for d in entries[:10000]:
        if d.name.endswith("_modules") and d.name != own and d.is_dir():
            if all((d / n).is_file() for n in needed):
                out.append(d)
    return out


def is_plain_basename(name: str) -> bool:
    """True for a non-empty file name with no directory part (Warp's rule, plus NUL)."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\:\0")


__all__ = ["modules_dir_for", "find_modules_dir", "sibling_modules_dirs", "is_plain_basename"]
