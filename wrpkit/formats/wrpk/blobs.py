"""The ``.wrpk`` header and blob area: reading and checking the 128-byte
header, the blobs' tiling, padding and SHA-256, and checksums deferred to
the caller (:class:`DeferredChecksum`, :class:`BackgroundVerification`).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple, Optional

from ... import model as m
from ...errors import WrpFormatError, WrpIntegrityError, WrpVersionError
from .tables import (ALIGN, CONTAINER_VERSIONS, HEADER, HEADER_SIZE, MAGIC, MAP_FROM_VERSION, MAP_MIN_BLOB,
                     MAX_MANIFEST, _align, memory_data_offsets, place_blob)


def sha256_digest(data) -> bytes:
    """The SHA-256 of a bytes-like object, as 32 bytes."""
    return hashlib.sha256(data).digest()


class WrpkHeader(NamedTuple):
    """The fields of a ``.wrpk`` header (magic and reserved bytes checked, not kept)."""

    container_version: int
    flags: int
    manifest_offset: int
    manifest_size: int
    blob_area_offset: int
    blob_area_size: int
    manifest_sha256: bytes


def as_bytes_view(data) -> memoryview:
    """A flat unsigned-byte ``memoryview`` of any buffer (``bytes``, ``mmap``, a typed view)."""
    buf = memoryview(data)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    return buf


def read_header(data) -> WrpkHeader:
    """Read and check the 128-byte header of a ``.wrpk`` (step 1 of the format's reader checks).

    Args:
        data: The whole file (its size is checked against the header).

    Raises:
        WrpVersionError: Another container version.
        WrpFormatError: Any other header field is wrong, or the file's size does
            not match the header (truncated, trailing bytes).
    """
    buf = as_bytes_view(data)
    size = len(buf)
    hint = "The file is truncated or is not a .wrpk bundle."
    if size < HEADER_SIZE:
        raise WrpFormatError(f"file is {size} bytes, too small for the {HEADER_SIZE}-byte WRPK header",
                             field="header", offset=0, hint=hint)
    magic, version, flags, moff, msize, boff, bsize, msha, reserved = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        kind = "a WRP1 .wrp capture" if magic[:4] == b"WRP1" else "not a .wrpk bundle"
        raise WrpFormatError(f"bad magic {magic!r}, expected {MAGIC!r}: {kind}", field="header.magic", offset=0,
                             hint="A magic mangled as b'WRPK\\n\\x1a\\n' means a text-mode transfer; copy the "
                                  "file in binary mode." if magic[:4] == b"WRPK" else None)
    if version not in CONTAINER_VERSIONS:
        raise WrpVersionError(f"container version {version} is not supported (this wrpkit reads "
                              f"{' and '.join(map(str, CONTAINER_VERSIONS))})", field="header.container_version", offset=8,
                              hint="Upgrade wrpkit, or rebuild the bundle with this one.")
    if flags != 0:
        raise WrpFormatError(f"flags must be 0, found {flags:#x}", field="header.flags", offset=12)
    if any(reserved):
        raise WrpFormatError("reserved bytes must be zero", field="header.reserved", offset=80)
    if moff != HEADER_SIZE:
        raise WrpFormatError(f"manifest must start at byte {HEADER_SIZE}, found {moff}",
                             field="header.manifest_offset", offset=16)
    if msize < 8 or msize > MAX_MANIFEST:
        raise WrpFormatError(f"manifest size {msize} is not between 8 bytes and 2 GiB",
                             field="header.manifest_size", offset=24)
    if boff != _align(HEADER_SIZE + msize):
        raise WrpFormatError(f"blob area must start at byte {_align(HEADER_SIZE + msize)} (the manifest's end "
                             f"rounded up to {ALIGN}), found {boff}", field="header.blob_area_offset", offset=32)
    if boff > size or bsize != size - boff:
        raise WrpFormatError(f"file is {size} bytes but its header describes {boff + bsize} bytes "
                             f"({'truncated' if boff + bsize > size else 'trailing bytes'})",
                             field="header.blob_area_size", offset=40, hint=hint)
    return WrpkHeader(version, flags, moff, msize, boff, bsize, msha)


class DeferredChecksum(NamedTuple):
    """A region-data blob whose SHA-256 the caller of :func:`decode_wrpk` must verify."""

    region_id: int
    name: str  # "region 3 initial data"
    field: str  # "regions[0].data"
    offset: int  # of the blob in the file
    sha256: bytes

    def matches(self, data) -> bool:
        """True when ``data`` (the blob's bytes, or a copy of them) has the recorded SHA-256."""
        return sha256_digest(data) == self.sha256

    def error(self) -> WrpIntegrityError:
        """The error to raise when :meth:`matches` is False."""
        return _blob_mismatch(self.name, self.field, self.offset)


def _blob_mismatch(name: str, field: str, offset: int) -> WrpIntegrityError:
    """The error for a blob whose bytes do not have their recorded SHA-256."""
    return WrpIntegrityError(f"SHA-256 of {name} does not match: the bundle was altered or corrupted",
                             field=field, offset=offset, hint="Rebuild the bundle from the original capture.")


class BackgroundVerification:
    """Verify :class:`DeferredChecksum` s on a worker thread while the caller
    writes or loads the same data (hashlib releases the GIL).

    Args:
        checks: ``(DeferredChecksum, data)`` pairs; ``data`` is the region's
            bytes as the caller uses them (a copy, ideally).
    """

    def __init__(self, checks):
        import threading  # noqa: PLC0415

        self._failure: Optional[WrpIntegrityError] = None
        self._thread = threading.Thread(target=self._run, args=(list(checks),), name="wrpkit-verify",
                                        daemon=True)
        self._thread.start()

    def _run(self, checks) -> None:
        for check, data in checks:
            if not check.matches(data):
                self._failure = check.error()
                return

    def wait(self) -> None:
        """Wait until every checksum is verified.

        Raises:
            WrpIntegrityError: The first region whose data does not match.
        """
        self._thread.join()
        if self._failure is not None:
            raise self._failure


def check_blobs(rd, prog: m.Program, buf, boff: int, bsize: int, verify: bool,
                 deferred: Optional[list] = None, version: int = 1) -> None:
    """Check the blob area (step 5 of the format's reader checks) and point the
    program's blob fields at it.

    Args:
        rd: The :class:`~.reader._Reader` that walked the manifest (its ``blobs``
            lists every blob reference with its manifest position).
        prog: The program decoded from that manifest; its blob fields are set.
        buf: The whole file.
        boff, bsize: The blob area's offset and size, from the header.
        verify: Check every blob's SHA-256.
        deferred: See :func:`~.reader.decode_wrpk`.
        version: The header's container version (its tiling rule, :func:`~.tables.place_blob`).

    Raises:
        WrpFormatError: A blob is misaligned, out of range, overlapping, or the
            padding is not zero.
        WrpIntegrityError: A blob's SHA-256 does not match.
    """
    # Name each blob by its place in the model.
    index = {id(r): f"regions[{i}]" for i, r in enumerate(prog.regions)}
    index.update((id(mod), f"modules[{i}]") for i, mod in enumerate(prog.modules))
    # Version 2 places large region data at offsets congruent to its place in the WRP1 image.
    memory_offsets = memory_data_offsets(prog.regions) if version >= MAP_FROM_VERSION else {}
    entries = []
    for obj, attr, name, off, length, sha, pos in rd.blobs:
        path = f"{index[id(obj)]}.{attr}"
        at = HEADER_SIZE + pos
        mapped = memory_offsets.get(obj.region_id) if attr == "data" and length >= MAP_MIN_BLOB else None
        if length == 0:
            if off or sha:
                raise WrpFormatError(f"empty blob of {name} must have offset 0 and no SHA-256", field=path,
                                     offset=at)
        else:
            if len(sha) != 32:
                raise WrpFormatError(f"SHA-256 of {name} must be 32 bytes, found {len(sha)}",
                                     field=path + ".sha256", offset=at)
            if mapped is None and off % ALIGN:
                raise WrpFormatError(f"blob offset {off} of {name} is not a multiple of {ALIGN}",
                                     field=path + ".offset", offset=at)
            if off > bsize or length > bsize - off:
                raise WrpFormatError(f"blob of {name} ({length} bytes at {off}) runs past the "
                                     f"{bsize}-byte blob area", field=path + ".length", offset=at)
            entries.append((off, length, path, name, sha, at, mapped))
        setattr(obj, attr, buf[boff + off:boff + off + length])
    # The blobs tile the blob area in offset order: each where place_blob puts it after the
    # previous one (the next 64-byte boundary, or for mapped region data the next offset
    # congruent to its image offset), zeros between.
    entries.sort(key=lambda e: (e[0], e[1]))
    pos = 0
    for off, length, path, name, _, at, mapped in entries:
        expect = place_blob(pos, length, mapped, version)
        if off != expect:
            what = "overlaps the previous blob" if off < pos else "leaves a gap after the previous blob"
            raise WrpFormatError(f"blob of {name} at {off} {what} (expected at {expect})",
                                 field=path + ".offset", offset=at)
        if any(buf[boff + pos:boff + off]):
            raise WrpFormatError("padding between blobs must be zero", field="blob_area", offset=boff + pos)
        pos = off + length
    if pos != bsize:
        raise WrpFormatError(f"the blobs end at {pos} but the blob area is {bsize} bytes",
                             field="header.blob_area_size", offset=40)
    if verify:
        if deferred is not None:
            mesh_regions = {rid for me in prog.meshes
                            for rid in (me.points_region_id, me.indices_region_id, me.velocities_region_id)}
            ids = {f"regions[{i}].data": r.region_id for i, r in enumerate(prog.regions)
                   if r.region_id not in mesh_regions}
            later = [e for e in entries if e[2] in ids]
            deferred.extend(DeferredChecksum(ids[path], name, path, boff + off, sha)
                            for off, _, path, name, sha, _, _ in later)
            entries = [e for e in entries if e[2] not in ids]
        for off, length, path, name, sha, _, _ in entries:
            if sha256_digest(buf[boff + off:boff + off + length]) != sha:
                raise _blob_mismatch(name, path, boff + off)


__all__ = ["read_header", "WrpkHeader", "check_blobs", "DeferredChecksum", "BackgroundVerification",
           "as_bytes_view", "sha256_digest"]
