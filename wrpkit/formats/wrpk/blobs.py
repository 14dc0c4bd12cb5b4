"""The ``.wrpk`` header and blob area: reading and checking the 128-byte
header, the blobs' tiling, padding and SHA-256 (whole and per chunk), and
checksums deferred to the caller (:class:`DeferredChecksum`,
:class:`BackgroundVerification`).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple, Optional

from ... import model as m
from ...errors import WrpFormatError, WrpIntegrityError, WrpVersionError
from .tables import (ALIGN, CONTAINER_VERSIONS, HEADER, HEADER_SIZE, MAGIC, MAP_FROM_VERSION, MAP_MIN_BLOB,
                     MAX_MANIFEST, MIN_DIGEST_CHUNK, _align, chunk_count, memory_data_offsets, place_blob)


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


def chunk_spans(length: int, chunk_length: int) -> list:
    """``(begin, end)`` of each consecutive ``chunk_length``-byte chunk of ``length`` bytes (the last shorter)."""
    return [(b, min(length, b + chunk_length)) for b in range(0, length, chunk_length)]


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
    """A region-data blob whose SHA-256 the caller of :func:`decode_wrpk` must verify.

    With chunk digests (``chunk_length`` set) the caller verifies those instead of
    ``sha256``: they cover the same bytes and can be hashed on several threads.
    """

    region_id: int
    name: str  # "region 3 initial data"
    field: str  # "regions[0].data"
    offset: int  # of the blob in the file
    sha256: bytes
    chunk_length: int = 0
    chunk_sha256: bytes = b""

    def pieces(self, data) -> list:
        """``(view, expected digest, error)`` per hash to compute over ``data`` (the blob's
        bytes or a copy of them): one per chunk with chunk digests, else one for the whole."""
        buf = as_bytes_view(data)
        if not self.chunk_length:
            return [(buf, self.sha256, self.error)]
        n = len(buf)
        return [(buf[b:e], self.chunk_sha256[32 * k:32 * k + 32],
                 _chunk_mismatch_factory(self.name, self.field, self.offset, k, b, e, n, self.chunk_length))
                for k, (b, e) in enumerate(chunk_spans(n, self.chunk_length))]

    def matches(self, data) -> bool:
        """True when ``data`` (the blob's bytes, or a copy of them) has the recorded digests."""
        return all(sha256_digest(view) == want for view, want, _ in self.pieces(data))

    def error(self) -> WrpIntegrityError:
        """The error to raise when the whole blob does not match."""
        return _blob_mismatch(self.name, self.field, self.offset)


def _blob_mismatch(name: str, field: str, offset: int) -> WrpIntegrityError:
    """The error for a blob whose bytes do not have their recorded SHA-256."""
    return WrpIntegrityError(f"SHA-256 of {name} does not match: the bundle was altered or corrupted",
                             field=field, offset=offset, hint="Rebuild the bundle from the original capture.")


def _chunk_mismatch_factory(name: str, field: str, offset: int, k: int, begin: int, end: int, length: int,
                            chunk_length: int):
    """A callable making the error for chunk ``k`` (bytes ``begin..end``) of a blob that does not match."""
    def make() -> WrpIntegrityError:
        count = chunk_count(length, chunk_length)
        return WrpIntegrityError(f"SHA-256 of {name} does not match in chunk {k} of {count} (bytes {begin}..{end} "
                                 f"of {length}): the bundle was altered or corrupted", field=field + ".chunk_sha256",
                                 offset=offset + begin, hint="Rebuild the bundle from the original capture.")
    return make


def _locating_error(check: DeferredChecksum, data):
    """A callable making the error for a whole blob that does not match: it names the first
    chunk that does not match either, when the blob has chunk digests (found then, on failure)."""
    def make() -> WrpIntegrityError:
        for view, want, error in (check.pieces(data) if check.chunk_length else ()):
            if sha256_digest(view) != want:
                return error()
        return check.error()
    return make


def check_chunk_fields(name: str, path: str, at: int, length: int, chunk_length: int, chunk_sha: bytes) -> None:
    """Check a blob's chunk digest fields (WRPK-FORMAT.md "Chunk digests"; the C++
    reader's ``check_chunk_fields`` applies the same rule).

    Raises:
        WrpFormatError: ``chunk_length`` is set but not a power of two of at least
            :data:`~.tables.MIN_DIGEST_CHUNK`, or ``chunk_sha256`` is not 32 bytes per chunk
            (or is present without a ``chunk_length``).
    """
    if not chunk_length:
        if chunk_sha:
            raise WrpFormatError(f"chunk digests of {name} are given but its chunk_length is 0",
                                 field=path + ".chunk_sha256", offset=at)
        return
    if chunk_length & (chunk_length - 1) or chunk_length < MIN_DIGEST_CHUNK:
        raise WrpFormatError(f"chunk_length {chunk_length} of {name} is not a power of two of at least "
                             f"{MIN_DIGEST_CHUNK}", field=path + ".chunk_length", offset=at)
    want = 32 * chunk_count(length, chunk_length)
    if len(chunk_sha) != want:
        raise WrpFormatError(f"chunk digests of {name} must be {want} bytes (32 per {chunk_length}-byte chunk), "
                             f"found {len(chunk_sha)}", field=path + ".chunk_sha256", offset=at)


# Below this many bytes to hash, the calling thread hashes alone (a thread costs more than it saves).
_PARALLEL_HASH_BYTES = 8 << 20
# No more hashing threads than this, however many cores (memory bandwidth is shared).
_MAX_HASH_THREADS = 32


class _HashWork:
    """``(view, expected digest, error factory)`` items hashed by every thread that calls
    :meth:`work`, each taking the next item in turn (largest first: whole blobs before
    chunks).  Of several failures found, the one listed first is raised."""

    def __init__(self, items):
        import threading  # noqa: PLC0415

        # (view, want, error): sorted by size for the work, but the failure raised is the
        # earliest in the caller's order (its index in the list is kept as the sort's tie-breaker).
        listed = list(items)
        order = sorted(range(len(listed)), key=lambda i: (-len(listed[i][0]), i))
        self.items = [listed[i] for i in order]
        self._rank = order
        self.bytes = sum(len(it[0]) for it in self.items)
        self._next = iter(range(len(self.items)))
        self._lock = threading.Lock()
        self._failed: Optional[int] = None

    def work(self) -> None:
        while self._failed is None:
            with self._lock:
                i = next(self._next, None)
            if i is None:
                return
            view, want, _ = self.items[i]
            if sha256_digest(view) != want:
                with self._lock:
                    if self._failed is None or self._rank[i] < self._rank[self._failed]:
                        self._failed = i

    def raise_failure(self) -> None:
        if self._failed is not None:
            raise self.items[self._failed][2]()

    def start_threads(self, busy_caller: bool) -> list:
        """Threads running :meth:`work`: ``cpu_count() - 1`` (at least 1) beside a busy caller,
        else only for large work; never more than there are items."""
        import os  # noqa: PLC0415
        import threading  # noqa: PLC0415

        want = max(1, (os.cpu_count() or 1) - 1)
        if not busy_caller:
            want = 0 if self.bytes < _PARALLEL_HASH_BYTES else min(want, len(self.items) - 1)
        threads = []
        for _ in range(min(want, len(self.items), _MAX_HASH_THREADS)):
            t = threading.Thread(target=self.work, name="wrpkit-verify", daemon=True)
            try:
                t.start()
            except RuntimeError:  # no thread to spare: the caller's own work() covers it
                break
            threads.append(t)
        return threads


def _verify_now(items) -> None:
    """Hash ``items`` (see :class:`_HashWork`) on this thread and, for large work, others.

    Raises:
        WrpIntegrityError: The first item found not to match.
    """
    work = _HashWork(items)
    threads = work.start_threads(busy_caller=False)
    work.work()
    for t in threads:
        t.join()
    work.raise_failure()


class BackgroundVerification:
    """Verify :class:`DeferredChecksum` s on worker threads while the caller
    writes or loads the same data (hashlib releases the GIL).

    A blob with chunk digests is shared out chunk by chunk over
    ``cpu_count() - 1`` threads (at least 1), and :meth:`wait` makes the
    caller join the same work, so one large region is hashed on every core.

    Args:
        checks: ``(DeferredChecksum, data)`` pairs; ``data`` is the region's
            bytes as the caller uses them (a copy, ideally).
    """

    def __init__(self, checks):
        self._work = _HashWork(piece for check, data in checks for piece in check.pieces(data))
        self._threads = self._work.start_threads(busy_caller=True)

    def wait(self) -> None:
        """Help verify what is left, and wait until every checksum is verified.

        Raises:
            WrpIntegrityError: The first region (or chunk) found whose data does not match.
        """
        self._work.work()
        for t in self._threads:
            t.join()
        self._work.raise_failure()


def check_blobs(rd, prog: m.Program, buf, boff: int, bsize: int, verify: bool,
                 deferred: Optional[list] = None, version: int = 1, thorough: bool = False) -> None:
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
        thorough: See :func:`~.reader.decode_wrpk`: a blob with chunk digests is
            hashed whole as well (each of its bytes twice).

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
    for obj, attr, name, off, length, sha, pos, chunk_length, chunk_sha in rd.blobs:
        path = f"{index[id(obj)]}.{attr}"
        at = HEADER_SIZE + pos
        mapped = memory_offsets.get(obj.region_id) if attr == "data" and length >= MAP_MIN_BLOB else None
        if length == 0:
            if off or sha or chunk_length or chunk_sha:
                raise WrpFormatError(f"empty blob of {name} must have offset 0 and no SHA-256", field=path,
                                     offset=at)
        else:
            if len(sha) != 32:
                raise WrpFormatError(f"SHA-256 of {name} must be 32 bytes, found {len(sha)}",
                                     field=path + ".sha256", offset=at)
            check_chunk_fields(name, path, at, length, chunk_length, chunk_sha)
            if mapped is None and off % ALIGN:
                raise WrpFormatError(f"blob offset {off} of {name} is not a multiple of {ALIGN}",
                                     field=path + ".offset", offset=at)
            if off > bsize or length > bsize - off:
                raise WrpFormatError(f"blob of {name} ({length} bytes at {off}) runs past the "
                                     f"{bsize}-byte blob area", field=path + ".length", offset=at)
            entries.append((off, length, path, name, sha, at, mapped, chunk_length, chunk_sha))
        setattr(obj, attr, buf[boff + off:boff + off + length])
    # The blobs tile the blob area in offset order: each where place_blob puts it after the
    # previous one (the next 64-byte boundary, or for mapped region data the next offset
    # congruent to its image offset), zeros between.
    entries.sort(key=lambda e: (e[0], e[1]))
    pos = 0
    for off, length, path, name, _, at, mapped, _, _ in entries:
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
            deferred.extend(DeferredChecksum(ids[path], name, path, boff + off, sha, chunk_length, chunk_sha)
                            for off, _, path, name, sha, _, _, chunk_length, chunk_sha in later)
            entries = [e for e in entries if e[2] not in ids]
        # A blob with chunk digests is checked by its chunks, as the C++ reader checks it: they
        # cover the same bytes, and hash on every core.  The thorough check (wrp validate) also
        # verifies its whole SHA-256, so that a file passes there only if every reader accepts
        # it, released ones that know no chunk digests included.
        items = []
        for off, length, path, name, sha, _, _, chunk_length, chunk_sha in entries:
            data = buf[boff + off:boff + off + length]
            check = DeferredChecksum(0, name, path, boff + off, sha, chunk_length, chunk_sha)
            if thorough or not chunk_length:
                items.append((as_bytes_view(data), sha, _locating_error(check, data)))
            if chunk_length:
                items.extend(check.pieces(data))
        _verify_now(items)


__all__ = ["read_header", "WrpkHeader", "check_blobs", "check_chunk_fields", "DeferredChecksum",
           "BackgroundVerification", "as_bytes_view", "chunk_spans", "sha256_digest"]
