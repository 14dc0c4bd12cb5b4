"""``wrp-replay --list`` of a .wrpk reads its records only, as ``wrp inspect`` does: it neither copies nor
hashes the blobs (region data, module files), so listing a large bundle costs what its records cost.
``--verify`` adds every blob's SHA-256 check; a replay always makes it."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from wrpkit.formats.wrpk.blobs import read_header
from wrpkit.formats.wrpk.reader import decode_wrpk
from wrpkit.formats.convert import convert

from proc_helpers import run


def _bundle_with_blobs(captures, tmp_path):
    """A .wrpk of a real capture, and ``{blob name: (file offset, length)}`` of its region-data blobs."""
    for name, src in sorted(captures.items()):
        out = tmp_path / f"{name}.wrpk"
        convert(src, out)
        buf = out.read_bytes()
        prog = decode_wrpk(buf)
        base = np.frombuffer(buf, np.uint8).ctypes.data
        blobs = {f"region {r.region_id} initial data": (int(np.frombuffer(r.data, np.uint8).ctypes.data - base),
                                                        len(r.data))
                 for r in prog.regions if r.has_initial_data and r.size}
        if blobs:
            return out, blobs
    pytest.skip("no capture has region data")


_run = partial(run, timeout=120)  # wrp-replay ARGS, as run() does, within 2 minutes


def test_list_does_not_hash_blobs_and_verify_does(captures, replayer, tmp_path):
    bundle, blobs = _bundle_with_blobs(captures, tmp_path)
    assert _run(replayer, bundle, "--list").returncode == 0
    name, (off, n) = next(iter(sorted(blobs.items())))
    data = bytearray(bundle.read_bytes())
    data[off + n // 2] ^= 0x10  # one bit of region data: the records are untouched
    tampered = tmp_path / "tampered.wrpk"
    tampered.write_bytes(bytes(data))

    listed = _run(replayer, tampered, "--list")
    assert listed.returncode == 0, listed.stderr
    assert _run(replayer, bundle, "--list").stdout == listed.stdout

    verified = _run(replayer, tampered, "--list", "--verify")
    assert verified.returncode == 3, verified.stderr
    assert f"SHA-256 of {name} does not match" in verified.stderr and "integrity" in verified.stderr

    both = _run(replayer, tampered, "--list", "--verify", "--no-verify")
    assert both.returncode == 2 and "contradict" in both.stderr, both.stderr


def test_list_still_checks_the_manifest_and_structure(captures, replayer, tmp_path):
    """Records are still checked in full: the manifest's own SHA-256, and a blob running past the blob area."""
    bundle, _ = _bundle_with_blobs(captures, tmp_path)
    data = bytearray(bundle.read_bytes())
    header = read_header(bytes(data))
    data[128 + header.manifest_size // 2] ^= 0x01
    bad = tmp_path / "manifest.wrpk"
    bad.write_bytes(bytes(data))
    res = _run(replayer, bad, "--list")
    assert res.returncode == 3 and "SHA-256 of the manifest" in res.stderr, res.stderr
    cut = tmp_path / "cut.wrpk"
    cut.write_bytes(bundle.read_bytes()[:-64])
    res = _run(replayer, cut, "--list")
    assert res.returncode == 3, res.stderr
