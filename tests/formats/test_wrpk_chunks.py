"""Chunk digests of large ``.wrpk`` blobs (issue 24: ``Blob.chunk_length`` and
``Blob.chunk_sha256``, schema/WRPK-FORMAT.md "Chunk digests").

A capture made with stock Warp at test time holds one 24 MiB region (float32,
initialised) and a small vec3 one.  ``wrp convert`` gives the large region a
SHA-256 per 4 MiB chunk, checked here against hashlib; a byte flipped in its
middle chunk is refused by wrp-replay (replay and ``--list --verify``), the
C API, the python engine and ``wrp validate``, each naming the chunk's byte
range; a bundle written without chunk digests (the layout of every bundle
before them) still replays, its data checked whole; and hostile chunk fields
get the same refusal, naming the same field, from the python and the C++
reader.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import wrpkit
from proc_helpers import wrp
from wrpkit.formats.container import open_capture
from wrpkit.formats.wrpk import builder, reader
from wrpkit.formats.wrpk.tables import DIGEST_CHUNK, HEADER_SIZE, _align

wp.config.quiet = True
N_BIG = 6 << 20  # float32: 24 MiB, six 4 MiB chunks
N_SMALL = 1000
WARP_BIN = Path(wp.__file__).resolve().parent / "bin"


@wp.kernel
def k_scale(big: wp.array(dtype=wp.float32), small: wp.array(dtype=wp.vec3), s: wp.float32):
    i = wp.tid()
    big[i] = big[i] * s + 1.0
    if i < small.shape[0]:
        small[i] = small[i] * s


def _capture(path: Path) -> Path:
    big = wp.array(np.arange(N_BIG, dtype=np.float32) % 977.0, device="cpu")
    small = wp.array(np.ones((N_SMALL, 3), np.float32), dtype=wp.vec3, device="cpu")
    wp.capture_begin(device="cpu", apic=True)
    wp.launch(k_scale, dim=N_BIG, inputs=[big, small, 0.5], device="cpu")
    graph = wp.capture_end(device="cpu")
    wp.capture_save(graph, str(path), inputs={"big": big}, outputs={"big": big, "small": small})
    return path


def _replay(replayer, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(replayer), *map(str, args), "--warp-lib-dir", str(WARP_BIN)], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("chunks")
    # "plain": what every wrpkit before chunk digests wrote.
    paths = {"wrp": _capture(d / "big.wrp"), "chunked": d / "big.wrpk", "plain": d / "plain.wrpk", "dir": d}
    assert wrp("convert", paths["wrp"], paths["chunked"]).returncode == 0
    with open_capture(paths["wrp"]) as cap:
        builder.write_wrpk(paths["plain"], cap.program, cap.module_files(), digest_chunk=0, durable=False)
    return paths


def _big_blob(path: Path):
    """(DeferredChecksum of the 24 MiB region's data, its bytes) in a bundle."""
    data = path.read_bytes()
    deferred = []
    prog = reader.decode_wrpk(data, deferred=deferred)
    check = max(deferred, key=lambda c: next(r.size for r in prog.regions if r.region_id == c.region_id))
    size = next(r.size for r in prog.regions if r.region_id == check.region_id)
    assert size == 4 * N_BIG
    return check, data[check.offset:check.offset + size]


def test_large_region_gets_a_digest_per_chunk_and_keeps_its_whole_digest(bundles):
    check, blob = _big_blob(bundles["chunked"])
    assert check.chunk_length == DIGEST_CHUNK
    want = b"".join(hashlib.sha256(blob[i:i + DIGEST_CHUNK]).digest() for i in range(0, len(blob), DIGEST_CHUNK))
    assert check.chunk_sha256 == want and len(want) == 32 * 6
    assert check.sha256 == hashlib.sha256(blob).digest()
    # The small region is below the chunking threshold: whole digest only.
    deferred = []
    reader.decode_wrpk(bundles["chunked"].read_bytes(), deferred=deferred)
    assert [c.chunk_length for c in deferred if c is not check and c.region_id != check.region_id] == [0]
    # A bundle without chunk digests differs by the manifest only.
    plain, _ = _big_blob(bundles["plain"])
    assert plain.chunk_length == 0 and plain.chunk_sha256 == b"" and plain.sha256 == check.sha256


def test_chunked_and_plain_bundles_replay_like_the_wrp(bundles, replayer):
    expect = wrpkit.load(bundles["wrp"]).run()
    for kind in ("chunked", "plain"):
        got = wrpkit.load(bundles[kind]).run()
        assert set(got) == set(expect)
        for name in expect:
            np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(expect[name]), err_msg=f"{kind} {name}")
        res = _replay(replayer, bundles[kind])
        assert res.returncode == 0, res.stderr
        res = _replay(replayer, bundles[kind], "--list", "--verify")
        assert res.returncode == 0, res.stderr
    assert wrp("validate", bundles["chunked"]).returncode == 0


def _flipped(bundles, kind: str, name: str) -> tuple:
    """A copy of a bundle with one byte flipped in the middle chunk of the large region."""
    check, blob = _big_blob(bundles[kind])
    at = 2 * DIGEST_CHUNK + DIGEST_CHUNK // 2 + 12345  # chunk 2 of 0..5
    data = bytearray(bundles[kind].read_bytes())
    data[check.offset + at] ^= 0x10
    path = bundles["dir"] / name
    path.write_bytes(bytes(data))
    return path, check


def test_a_byte_flipped_in_the_middle_chunk_is_refused_naming_the_chunk(bundles, replayer):
    from wrpkit.run.replay.native_api import NativeGraph  # noqa: PLC0415

    path, check = _flipped(bundles, "chunked", "flipped.wrpk")
    chunk = f"chunk 2 of 6 (bytes {2 * DIGEST_CHUNK}..{3 * DIGEST_CHUNK} of {4 * N_BIG}"
    what = f"SHA-256 of region {check.region_id} initial data does not match in {chunk}"
    for args in ((), ("--list", "--verify")):
        res = _replay(replayer, path, *args)
        assert res.returncode == 3, res.stderr
        assert what in res.stderr and ".chunk_sha256" in res.stderr, res.stderr
    # The C API (wrp_program_open_memory).
    with pytest.raises(wrpkit.WrpFormatError, match="does not match in chunk 2 of 6"):
        NativeGraph(path.read_bytes(), {}, "cpu")
    # The python engine: hashed on threads while Warp loads, refused before the program is returned.
    with pytest.raises(wrpkit.WrpIntegrityError) as e:
        wrpkit.load(path)
    assert what in str(e.value)
    # A program replayed in a child: the child loads while this process hashes, and replays
    # nothing unless every chunk matched; a refused program refuses every run after.
    isolated = wrpkit.load(path, isolate=True)
    try:
        for _ in range(2):
            with pytest.raises(wrpkit.WrpIntegrityError, match="does not match in chunk 2 of 6"):
                isolated.run()
    finally:
        isolated.close()  # its child ends now, not when a reference cycle is collected
    # wrp validate, which also checks the whole-blob digest.
    res = wrp("validate", path, "--json")
    assert res.returncode == 3 and what in res.stdout, res.stdout + res.stderr
    res = wrp("replay", path)
    assert res.returncode == 3 and "chunk 2 of 6" in res.stdout + res.stderr, res.stdout + res.stderr


def test_a_bundle_without_chunk_digests_is_still_checked_whole(bundles, replayer):
    path, check = _flipped(bundles, "plain", "flipped_plain.wrpk")
    what = f"SHA-256 of region {check.region_id} initial data does not match"
    res = _replay(replayer, path)
    assert res.returncode == 3 and what in res.stderr and "chunk" not in res.stderr, res.stderr
    with pytest.raises(wrpkit.WrpIntegrityError, match=what) as e:
        wrpkit.load(path)
    assert "chunk" not in str(e.value)


def _with_chunk_fields(cap, region_index: int, chunk_length: int, chunk_sha: bytes, sha: bytes = None) -> bytes:
    """The bundle of ``cap`` with one region's chunk fields (and, given ``sha``, its whole
    digest) replaced (a hostile writer)."""
    layout = builder._Layout(cap.program, cap.module_files(), digest_chunk=0)
    off, n, whole, _, _ = layout.region_refs[region_index]
    layout.region_refs[region_index] = (off, n, whole if sha is None else sha, chunk_length, chunk_sha)
    manifest = builder._manifest(cap.program, layout)
    out = b"".join(bytes(c) for c in builder._chunks(builder._header(manifest, layout.end, layout.version),
                                                      manifest, layout))
    assert len(out) == _align(HEADER_SIZE + len(manifest)) + layout.end
    return out


def _region_index(cap, size: int) -> int:
    return next(i for i, r in enumerate(cap.program.regions) if r.size == size)


@pytest.mark.parametrize("chunk_length, sha_bytes, field, words", [
    (1000, 32 * 25, "chunk_length", "not a power of two"),
    (32 << 10, 32 * 1, "chunk_length", "not a power of two of at least 65536"),
    (1 << 16, 32 * 383, "chunk_sha256", "must be 12288 bytes (32 per 65536-byte chunk), found 12256"),
    (1 << 16, 32 * 385, "chunk_sha256", "found 12320"),
    (0, 32, "chunk_sha256", "given but its chunk_length is 0"),
    (1 << 63, 0, "chunk_sha256", "must be 32 bytes"),
])
def test_hostile_chunk_fields_are_refused_alike_by_python_and_cpp(bundles, replayer, chunk_length, sha_bytes, field,
                                                                    words):
    cap = open_capture(bundles["wrp"])
    i = _region_index(cap, 4 * N_BIG)
    data = _with_chunk_fields(cap, i, chunk_length, os.urandom(sha_bytes))
    path = bundles["dir"] / f"hostile_{chunk_length}_{sha_bytes}.wrpk"
    path.write_bytes(data)
    want = f"regions[{i}].data.{field}"
    with pytest.raises(wrpkit.WrpFormatError) as e:
        reader.decode_wrpk(data, verify_checksums=False)
    assert not isinstance(e.value, wrpkit.WrpIntegrityError)
    assert want in str(e.value) and words in str(e.value), str(e.value)
    res = _replay(replayer, path, "--list")  # structural: refused without hashing anything
    assert res.returncode == 3, res.stderr
    assert want in res.stderr and words in res.stderr, res.stderr
    res = wrp("validate", path, "--json")
    assert res.returncode == 3 and want in res.stdout, res.stdout


def test_chunk_digests_that_do_not_match_good_data_are_refused_by_both_readers(bundles, replayer):
    cap = open_capture(bundles["wrp"])
    i = _region_index(cap, 4 * N_BIG)
    blob = cap.program.regions[i].data
    chunk = 1 << 20
    good = b"".join(hashlib.sha256(bytes(blob[j:j + chunk])).digest() for j in range(0, 4 * N_BIG, chunk))
    # Every chunk digest right but the last: the whole digest matches, the chunk check does not.
    data = _with_chunk_fields(cap, i, chunk, good[:-32] + bytes(32))
    path = bundles["dir"] / "lying.wrpk"
    path.write_bytes(data)
    last = f"chunk 23 of 24 (bytes {23 * chunk}..{24 * chunk} of {4 * N_BIG}"
    res = _replay(replayer, path)
    assert res.returncode == 3 and last in res.stderr, res.stderr
    with pytest.raises(wrpkit.WrpIntegrityError, match=r"chunk 23 of 24 \(bytes"):
        reader.decode_wrpk(data)
    with pytest.raises(wrpkit.WrpIntegrityError, match=r"chunk 23 of 24 \(bytes"):
        wrpkit.load(path)
    # With the right digests, a 1 MiB chunk length is as good as the default.
    ok = bundles["dir"] / "mib.wrpk"
    ok.write_bytes(_with_chunk_fields(cap, i, chunk, good))
    assert _replay(replayer, ok).returncode == 0


def test_a_wrong_whole_digest_beside_right_chunks_fails_validate_only(bundles, replayer):
    """Chunk digests cover every byte, so readers check a chunked blob by its chunks alone
    (each byte hashed once, as the C++ reader does); ``wrp validate`` also checks the whole
    digest, which a reader that knows no chunk digests relies on."""
    cap = open_capture(bundles["wrp"])
    i = _region_index(cap, 4 * N_BIG)
    blob = cap.program.regions[i].data
    good = b"".join(hashlib.sha256(bytes(blob[j:j + DIGEST_CHUNK])).digest()
                    for j in range(0, 4 * N_BIG, DIGEST_CHUNK))
    path = bundles["dir"] / "wrong_whole.wrpk"
    path.write_bytes(_with_chunk_fields(cap, i, DIGEST_CHUNK, good, sha=bytes(32)))
    rid = cap.program.regions[i].region_id
    what = f"SHA-256 of region {rid} initial data does not match: the bundle was altered"
    res = wrp("validate", path, "--json")
    assert res.returncode == 3 and what in res.stdout, res.stdout + res.stderr
    res = wrp("inspect", path, "--verify")
    assert res.returncode == 3 and "does not match" in res.stderr, res.stdout + res.stderr
    with pytest.raises(wrpkit.WrpIntegrityError, match="does not match: the bundle"):
        reader.decode_wrpk(path.read_bytes(), thorough=True)
    # The bytes are the writer's (every chunk matches): the readers replay it as the .wrp.
    reader.decode_wrpk(path.read_bytes())
    expect = wrpkit.load(bundles["wrp"]).run()
    got = wrpkit.load(path).run()
    for name in expect:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(expect[name]), err_msg=name)
    assert _replay(replayer, path).returncode == 0
    assert _replay(replayer, path, "--list", "--verify").returncode == 0
    assert wrp("graph", path, "-o", bundles["dir"] / "wrong_whole.html").returncode == 0


def test_builder_refuses_a_bad_digest_chunk(bundles):
    cap = open_capture(bundles["wrp"])
    for bad in (1000, 1 << 15):
        with pytest.raises(wrpkit.WrpFormatError, match="power of two of at least 65536"):
            builder.encode_wrpk(cap.program, cap.module_files(), digest_chunk=bad)
