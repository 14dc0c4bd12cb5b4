"""The .wrpk bundle as a user moves it around: convert, move it alone, replay, tamper."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import programs
import replay_cases as rc
from proc_helpers import invoke as wrp
import wrpkit


def bundle_alone(src, tmp_path, name):
    """Convert ``src`` to a .wrpk, then move the bundle alone into a fresh folder."""
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    res = wrp("convert", src, staging / f"{name}.wrpk")
    assert res.exit_code == 0, res.output
    far = tmp_path / "elsewhere" / "deeper"
    far.mkdir(parents=True, exist_ok=True)
    dst = far / f"{name}.wrpk"
    shutil.move(staging / f"{name}.wrpk", dst)
    shutil.rmtree(staging)
    assert list(far.iterdir()) == [dst]
    return dst


@pytest.mark.parametrize("name", [n for n in sorted(programs.PROGRAMS) if programs.PROGRAMS[n].replay_matches_live])
def test_moved_bundle_replays_like_live_execution(captures, tmp_path, name):
    wrpk = bundle_alone(captures[name], tmp_path, name)
    live = programs.run_live(programs.PROGRAMS[name])
    out = wrpkit.load(wrpk).run()
    for b in programs.PROGRAMS[name].outputs:
        assert np.array_equal(np.ascontiguousarray(out[b]).view(np.uint8).ravel(),
                              np.ascontiguousarray(live[b]).view(np.uint8).ravel()), b


@pytest.mark.parametrize("name", rc.sample_names())
def test_moved_sample_bundle_replays_through_the_cli(tmp_path, name):
    src, inputs, expected = rc.sample_capture(name)
    wrpk = bundle_alone(src, tmp_path, name)
    res = wrp("replay", wrpk, "--inputs", inputs, "--check", expected, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["check"]["ok"] is True
    assert wrp("validate", wrpk).exit_code == 0
    info = json.loads(wrp("inspect", wrpk, "--json").stdout)
    assert info["container"] == "wrpk" and all(m["present"] for m in info["modules"])
    back = tmp_path / "restored" / f"{name}.wrp"
    assert wrp("convert", wrpk, back).exit_code == 0
    assert back.read_bytes() == src.read_bytes()


def test_tampered_bundle_is_refused_naming_the_blob(captures, tmp_path):
    wrpk = bundle_alone(captures["views"], tmp_path, "views")
    data = bytearray(wrpk.read_bytes())
    data[-100] ^= 0x01  # inside the last blob (a module binary or region data)
    bad = tmp_path / "bad.wrpk"
    bad.write_bytes(bytes(data))
    out = tmp_path / "out.npz"
    for cmd in (("replay", bad, "--output", out), ("validate", bad), ("inspect", bad, "--verify")):
        res = wrp(*cmd)
        assert res.exit_code == 3, (cmd, res.output)
        assert "SHA-256" in res.output and ("module" in res.output or "region" in res.output), res.output
    assert not out.exists()
    assert wrp("inspect", bad).exit_code == 0  # inspect reads the records only: blobs are hashed by validate
    with pytest.raises(wrpkit.WrpIntegrityError):
        wrpkit.load(bad)


def test_skipping_checksums_needs_the_explicit_flag(captures, tmp_path):
    wrpk = bundle_alone(captures["scalars"], tmp_path, "scalars")
    data = bytearray(wrpk.read_bytes())
    # Flip a byte of the first region's data: harmless to run, but no longer what was bundled.
    from wrpkit.formats.wrpk.blobs import read_header  # noqa: PLC0415
    from wrpkit.formats.wrpk.reader import decode_wrpk  # noqa: PLC0415

    prog = decode_wrpk(bytes(data))
    region = next(r for r in prog.regions if r.has_initial_data and r.size)
    off = read_header(bytes(data)).blob_area_offset
    blob_start = bytes(data).find(bytes(region.data), off)
    data[blob_start] ^= 0x01
    bad = tmp_path / "flipped.wrpk"
    bad.write_bytes(bytes(data))
    assert wrp("replay", bad).exit_code == 3
    res = wrp("replay", bad, "--no-verify")
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("name", rc.sample_names())
def test_moved_bundle_replays_through_the_native_engine(tmp_path, name):
    from wrpkit.errors import WrpError  # noqa: PLC0415
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    try:
        native_paths().require_replayer()
    except WrpError:
        pytest.skip("wrp-replay is not built (pip install . builds it)")
    src, inputs, expected = rc.sample_capture(name)
    wrpk = bundle_alone(src, tmp_path, name)
    res = wrp("replay", wrpk, "--engine", "native", "--inputs", inputs, "--check", expected, "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["engine"] == "native" and report["check"]["ok"] is True


def test_tampered_region_data_fails_the_load_not_later(captures, tmp_path):
    """Region checksums are verified on the image handed to Warp, before load() returns."""
    wrpk = bundle_alone(captures["scalars"], tmp_path, "scalars")
    data = bytearray(wrpk.read_bytes())
    from wrpkit.formats.wrpk.blobs import read_header  # noqa: PLC0415
    from wrpkit.formats.wrpk.reader import decode_wrpk  # noqa: PLC0415

    prog = decode_wrpk(bytes(data))
    region = next(r for r in prog.regions if r.has_initial_data and r.size)
    start = bytes(data).find(bytes(region.data), read_header(bytes(data)).blob_area_offset)
    data[start + region.size - 1] ^= 0x80
    bad = tmp_path / "flipped.wrpk"
    bad.write_bytes(bytes(data))
    with pytest.raises(wrpkit.WrpIntegrityError, match=f"region {region.region_id} initial data"):
        wrpkit.load(bad)
    with pytest.raises(wrpkit.WrpIntegrityError, match=f"region {region.region_id} initial data"):
        wrpkit.load(bytes(data))
    wrpkit.load(wrpk).run()  # the untouched bundle loads


def test_unpacking_a_bundle_with_altered_region_data_writes_nothing(captures, tmp_path):
    """Region checksums are checked while the .wrp is written; a mismatch publishes no .wrp."""
    wrpk = bundle_alone(captures["scalars"], tmp_path, "scalars")
    data = bytearray(wrpk.read_bytes())
    from wrpkit.formats.wrpk.blobs import read_header  # noqa: PLC0415
    from wrpkit.formats.wrpk.reader import decode_wrpk  # noqa: PLC0415

    region = next(r for r in decode_wrpk(bytes(data)).regions if r.has_initial_data and r.size)
    start = bytes(data).find(bytes(region.data), read_header(bytes(data)).blob_area_offset)
    data[start] ^= 0x01
    bad = tmp_path / "flipped.wrpk"
    bad.write_bytes(bytes(data))
    out = tmp_path / "out"
    res = wrp("convert", bad, out / "x.wrp")
    assert res.exit_code == 3 and f"region {region.region_id} initial data" in res.output, res.output
    assert not (out / "x.wrp").exists()
    assert not list(out.rglob("*.o")) and not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    res = wrp("convert", bad, out / "x.wrpk")
    assert res.exit_code == 3 and not (out / "x.wrpk").exists()
