"""The user's ``.npy`` and ``.npz`` files, parsed from their mapping: arrays are views of it where they
can be (no copy of a large golden or inputs file), and never unpickled."""

from __future__ import annotations

import os
from typing import Union

from .errors import WrpBindingError, WrpError, WrpIOError, WrpOutOfMemoryError
from .file_reads import map_file

#: A path as callers pass it.
PathLike = Union[str, os.PathLike]


class _BufferReader:
    """A seekable, read-only file over a buffer (a file's mapping), for :mod:`zipfile`: no copy of it."""

    def __init__(self, buf):
        self._buf = memoryview(buf).cast("B")
        self._pos = 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._buf)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._buf) if n is None or n < 0 else min(len(self._buf), self._pos + n)
        out = bytes(self._buf[self._pos:end])
        self._pos = max(self._pos, end)
        return out


def _npy_view(buf):
    """The array an ``.npy``'s bytes hold, as a read-only view of ``buf`` (no copy); no pickles.

    Every size is checked against ``buf`` before the view is made.

    Raises:
        ValueError: Not a readable ``.npy`` (the message says why).
    """
    import io  # noqa: PLC0415
    import math  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    buf = memoryview(buf).cast("B")
    head = io.BytesIO(bytes(buf[:1 << 16]))  # the header only (numpy allows 10,000 bytes of it)
    version = np.lib.format.read_magic(head)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
    else:  # 3.0 (UTF-8 field names) and later: numpy's own reader, which copies
        arr = np.load(io.BytesIO(bytes(buf)), allow_pickle=False)
        if not isinstance(arr, np.ndarray):
            raise ValueError("it is an .npz archive, not a single array")
        return arr
    if dtype.hasobject:
        raise ValueError("it holds Python objects, which are never unpickled")
    offset = head.tell()
    count = math.prod(int(d) for d in shape)
    if offset + count * dtype.itemsize > len(buf):
        raise ValueError(f"its data is {len(buf) - offset} bytes but its header declares {count * dtype.itemsize}")
    arr = np.frombuffer(buf, dtype=dtype, count=count, offset=offset)
    return arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)


def npz_arrays(data) -> dict:
    """``{key: array}`` of the bytes of an ``.npz`` (no pickles).

    ``data`` may be a file's mapping: members stored uncompressed (``numpy.savez``)
    come back as read-only views of it, their CRC-32 checked, so that a
    golden or inputs file of many GiB costs no copy; compressed ones
    (``numpy.savez_compressed``) are decompressed into memory.

    Raises:
        ValueError: The bytes are not a readable ``.npz`` (the message says why).
    """
    import struct  # noqa: PLC0415
    import zipfile  # noqa: PLC0415
    import zlib  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    buf = memoryview(data).cast("B")
    try:
        if bytes(buf[:6]) == b"\x93NUMPY":
            raise ValueError("it holds a single array (.npy), not an archive")
        out = {}
        with zipfile.ZipFile(_BufferReader(buf)) as z:
            for info in z.infolist():
                if not info.filename.endswith(".npy"):
                    raise ValueError(f"member {info.filename!r} is not an .npy array")
                key = info.filename[:-len(".npy")]
                if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                    with z.open(info) as f:
                        out[key] = np.lib.format.read_array(f, allow_pickle=False)
                    continue
                # The member's bytes where the file holds them: past its local header, whose own
                # name and extra-field lengths say where they start.
                at = info.header_offset
                if at + 30 > len(buf) or bytes(buf[at:at + 4]) != b"PK\x03\x04":
                    raise ValueError(f"member {info.filename!r} has no local header at byte {at}")
                name_len, extra_len = struct.unpack_from("<HH", buf, at + 26)
                start = at + 30 + name_len + extra_len
                if start + info.file_size > len(buf):
                    raise ValueError(f"member {info.filename!r} runs past the end of the file")
                member = buf[start:start + info.file_size]
                if zlib.crc32(member) != info.CRC:
                    raise ValueError(f"member {info.filename!r} fails its CRC-32 check (a damaged file)")
                out[key] = _npy_view(member)
        return out
    except Exception as e:  # noqa: BLE001  (any failure: a bad npz)
        raise _unreadable(e) from None


def _npy_array(data):
    try:
        return _npy_view(data)
    except Exception as e:  # noqa: BLE001  (any failure: a bad npy)
        raise _unreadable(e) from None


def _unreadable(e: Exception) -> ValueError:
    """Why numpy's bytes could not be read: our own ValueError as it is, anything else named by its class."""
    return e if isinstance(e, ValueError) else ValueError(f"{type(e).__name__}: {e}")


_NUMPY_FILES = {"npz": (npz_arrays, "Write it with numpy.savez(path, name=array, ...)."),
                "npy": (_npy_array, "Write it with numpy.save(path, array).")}


def _load_numpy_file(path: PathLike, what: str, kind: str):
    """Parse the user's ``.npz``/``.npy`` from its mapping: its arrays are views of it where they can be
    (they keep it mapped), so reading a large golden or inputs file costs no copy."""
    parse, hint = _NUMPY_FILES[kind]
    try:
        mapped = map_file(path, what, follow_symlinks=True)  # the user's path
    except (WrpIOError, WrpOutOfMemoryError):
        raise  # a file that exists but cannot be read (or mapped: ulimit -v): exit 1 or 3, not a bad input
    except WrpError as e:
        raise WrpBindingError(e.message, hint=e.hint) from None
    try:
        return parse(mapped.buffer)
    except ValueError as e:
        raise WrpBindingError(f"cannot read {what} {path}: not a valid .{kind} ({e})", hint=hint) from None


def load_npz(path: PathLike, what: str = "inputs file") -> dict:
    """``{key: array}`` of an ``.npz`` the user names (no pickles; a symbolic link is followed).

    Args:
        path: The ``.npz``.
        what: What the file is, for messages ("inputs file", "golden file").

    Raises:
        WrpBindingError: The file is missing or not a valid ``.npz`` (exit 2).
        WrpIOError: The file exists but cannot be read (exit 1).
    """
    return _load_numpy_file(path, what, "npz")


def load_npy(path: PathLike, what: str = "input file"):
    """The array (``np.ndarray``) of an ``.npy`` the user names (no pickles; a symbolic link is followed).

    Args:
        path: The ``.npy``.
        what: What the file is, for messages.

    Raises:
        WrpBindingError: The file is missing or not a valid ``.npy`` (exit 2).
        WrpIOError: The file exists but cannot be read (exit 1).
    """
    return _load_numpy_file(path, what, "npy")


__all__ = ["load_npz", "load_npy", "npz_arrays"]
