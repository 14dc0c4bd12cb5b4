"""The WRP1 image of a ``.wrpk``'s program with its region data mapped from the bundle, not copied.

Warp's from-bytes loader takes one WRP1 image and copies each region's data out of it.
:func:`wrpkit.formats.wrp1.build_image` builds that image in fresh memory, so a bundle's
data was held twice while Warp loaded it: once in the image, once in Warp's allocations.
:func:`build_mapped_image` builds the same bytes in an anonymous mapping and puts the
whole pages of each region's data there as a second mapping of the bundle's own pages
(Linux ``mremap`` with ``old_size`` 0, which shares the pages of a ``MAP_SHARED``
mapping, as every file mapping of wrpkit is): the image then costs its records, not its
data.  Container version 2 places large region data in the bundle at offsets congruent to
their place in the image (:func:`wrpkit.formats.wrpk.tables.place_blob`), so the image is
reserved at a shift that lines all of them up; the partial pages at either end of a region,
and anything not backed by a mapping (``bytes``, a version-1 bundle's other regions), are
copied.  The C++ reader does the same (``ImagePlacer`` in ``native/src/wrpk_blobs.cpp``).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from typing import Optional

import numpy as np

from ...formats import wrp1

_MREMAP_MAYMOVE = 1
_MREMAP_FIXED = 2
_libc = None


def _mremap():
    """libc's ``mremap``, or None where there is none (not Linux)."""
    global _libc
    if _libc is None:
        if not sys.platform.startswith("linux"):
            _libc = False
        else:
            try:
                lib = ctypes.CDLL(None, use_errno=True)
                lib.mremap.restype = ctypes.c_void_p
                lib.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                                       ctypes.c_void_p]
                _libc = lib
            except (OSError, AttributeError):
                _libc = False
    return _libc.mremap if _libc else None


def _mapped_address(view: memoryview) -> Optional[int]:
    """The address of ``view``'s first byte when it lies in an ``mmap`` (a file's pages), else None."""
    if not isinstance(view.obj, mmap.mmap) or not view.nbytes:
        return None
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


def build_mapped_image(prog) -> tuple:
    """The WRP1 image of ``prog``, as :func:`wrpkit.formats.wrp1.build_image` returns it.

    Region data held in a shared file mapping (a ``.wrpk`` decoded from its mapped file)
    is mapped into the image where its pages line up, and copied otherwise.

    Args:
        prog: The program (:class:`wrpkit.model.Program`).

    Returns:
        ``(image, region_offsets)``: a read-only ``numpy.uint8`` array holding the file (it
        keeps its mapping alive), and ``{region_id: byte offset of its data in image}``.

    Raises:
        MemoryError: The address space for the image cannot be reserved.
    """
    from .file_guard import guard_alias  # noqa: PLC0415

    remap = _mremap()
    page = mmap.PAGESIZE
    chunks = [memoryview(c).cast("B") if not isinstance(c, memoryview) or c.format != "B" or c.ndim != 1
              else c for c in wrp1.iter_wrp1_chunks(prog)]
    # Chunk order (as build_image): header, section table, metadata, region count, then per
    # region its record and (if it has one) its data, then ops, annotations.
    data_chunks, k = {}, 4
    for r in prog.regions:
        k += 1
        if r.has_initial_data:
            data_chunks[k] = r.region_id
            k += 1
    # Mesh regions are always copied: their indices were validated, and a private copy keeps
    # what Warp loads equal to what was checked even if the file is written meanwhile.
    mesh = {rid for me in prog.meshes for rid in (me.points_region_id, me.indices_region_id, me.velocities_region_id)}
    mappable = {i for i, rid in data_chunks.items() if rid not in mesh}
    starts, pos = [], 0
    for c in chunks:
        starts.append(pos)
        pos += c.nbytes
    total = pos
    # The shift that lines up the largest mapped region's data with its file pages.
    candidates = [(chunks[i].nbytes, i, addr) for i in mappable if chunks[i].nbytes >= 2 * page
                  and (addr := _mapped_address(chunks[i])) is not None] if remap else []
    shift = 0
    if candidates:
        _, i, addr = max(candidates)
        shift = (addr - starts[i]) % page
    length = -(-(total + shift) // page) * page
    try:
        reserved = mmap.mmap(-1, max(length, page), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                             | getattr(mmap, "MAP_NORESERVE", 0))
    except OSError as e:
        raise MemoryError(f"cannot reserve {length} bytes for the WRP1 image: {e}") from None
    whole = np.frombuffer(reserved, dtype=np.uint8)  # keeps `reserved` mapped while any view lives
    image = whole[shift:shift + total]
    base = whole.ctypes.data + shift
    mapping = bool(candidates)
    offsets = {}
    for i, c in enumerate(chunks):
        at, n = starts[i], c.nbytes
        if i in data_chunks:
            offsets[data_chunks[i]] = at
        if mapping and i in mappable and n >= 2 * page:
            src = _mapped_address(c)
            dst = base + at
            if src is not None and (dst - src) % page == 0:
                lo, hi = -(-dst // page) * page, (dst + n) // page * page
                head, middle = lo - dst, hi - lo
                if middle > 0:
                    got = remap(src + head, 0, middle, _MREMAP_MAYMOVE | _MREMAP_FIXED, lo)
                    if got == lo:
                        guard_alias(reserved, lo, middle, src + head)  # a fault there names the file too
                        image[at:at + head] = np.frombuffer(c[:head], dtype=np.uint8)
                        image[at + head + middle:at + n] = np.frombuffer(c[head + middle:], dtype=np.uint8)
                        continue
                    # Not a shared mapping after all: copy from here on (the call left the pages as reserved).
                    mapping = False
                    if got not in (None, ctypes.c_void_p(-1).value):  # pragma: no cover  (mremap moved them)
                        raise MemoryError(f"mremap placed the image's pages at {got:#x}, not {lo:#x}")
                    _restore_reserved(lo, middle, os.strerror(ctypes.get_errno()))
        image[at:at + n] = np.frombuffer(c, dtype=np.uint8)
    image.flags.writeable = False
    return image, offsets


def _restore_reserved(addr: int, length: int, reason: str) -> None:
    """Map fresh anonymous pages at ``addr`` in case a failed ``mremap`` dropped the reserved ones."""
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mmap.restype = ctypes.c_void_p
    lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x10  # MAP_FIXED
    got = lib.mmap(addr, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if got != addr:
        raise MemoryError(f"cannot map {length} bytes of the WRP1 image again after mremap failed ({reason})")


__all__ = ["build_mapped_image"]
