"""How `wrp upgrade` writes: checks before anything is published, a light CLI, shared launch records.

The upgrade checks its output while the data is written back to disk (the
checks run once every byte is written, before the file is synced and given
its name), so these tests pin what that must not change: an output that
would not validate leaves nothing behind, in either form.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from wrpkit import model as m
from wrpkit.errors import WrpError
from wrpkit.formats.launch_arrays import exceeded_launches
from wrpkit.formats.wrp1 import decode_wrp1
from proc_helpers import LEGACY_FIXTURES

LEGACY = LEGACY_FIXTURES


def _copy_case(tmp_path: Path, rel: str, case: str) -> Path:
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    shutil.copy(LEGACY / rel / f"{case}.wrp", d)
    shutil.copytree(LEGACY / rel / f"{case}_modules", d / f"{case}_modules")
    return d / f"{case}.wrp"


@pytest.mark.parametrize("ext", ["wrp", "wrpk"])
def test_output_that_would_not_validate_publishes_nothing(tmp_path, ext):
    import wrpkit

    # Warp 1.18's saxpy capture, its module object swapped for the struct case's
    # (a valid ELF object that does not define the saxpy kernel's symbols).
    src = _copy_case(tmp_path, "1.18.0", "saxpy")
    (obj,) = (src.parent / "saxpy_modules").iterdir()
    (other,) = (LEGACY / "1.18.0" / "struct_modules").iterdir()
    obj.write_bytes(other.read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(WrpError, match="would not validate, so nothing was written") as e:
        wrpkit.upgrade(src, out / f"saxpy.{ext}")
    assert "saxpy" in e.value.message
    assert os.listdir(out) == []  # no output, no modules folder, no temporary file


def test_cli_upgrade_imports_neither_warp_numpy_rich_nor_flatbuffers(tmp_path):
    src = _copy_case(tmp_path, "1.18.0", "struct")
    code = ("import sys; from click.testing import CliRunner; from wrpkit.cli import main; "
            f"r = CliRunner().invoke(main, ['upgrade', {str(src)!r}, {str(tmp_path / 'new.wrp')!r}]); "
            "assert r.exit_code == 0, r.output; assert 'format 18' in r.output, r.output; "
            "heavy = {'warp', 'numpy', 'rich', 'flatbuffers'} & set(sys.modules); assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)
    assert decode_wrp1((tmp_path / "new.wrp").read_bytes()).format_version == 18


def test_shared_launch_records_are_reported_at_every_path():
    # A Warp 1.18 launch over arrays of n elements, made to run more threads than
    # that and listed three times as one object (as decode_wrp1(share_ops=True)
    # lists byte-identical records), once inside a WHILE body.
    prog = decode_wrp1((LEGACY / "1.18.0" / "saxpy.wrp").read_bytes())
    launch = next(op for op in prog.ops if isinstance(op, m.KernelLaunch))
    assert list(exceeded_launches([launch])) == []  # as captured, every thread has its element
    big = replace(launch, size=launch.size * 4, dim=launch.dim * 4,
                  shape=(launch.shape[0] * 4, *launch.shape[1:]))
    loop = m.While(cond_region_id=1, cond_offset=0, body=[big])
    shared = [big, big, loop]
    found = [(w, n) for w, _, n in exceeded_launches(shared)]
    assert [w for w, _ in found] == ["ops[0]", "ops[1]", "ops[2].body[0]"]
    copies = [copy.copy(big), copy.copy(big), replace(loop, body=[copy.copy(big)])]
    assert [(w, n) for w, _, n in exceeded_launches(copies)] == found
    assert found[0][1] == launch.size


@pytest.mark.parametrize("ext", ["wrp", "wrpk"])
def test_no_fsync_writes_the_same_bytes_without_syncing(tmp_path, ext, monkeypatch):
    """--no-fsync / durable=False: the same validated output, published atomically, with no fsync."""
    from click.testing import CliRunner

    import wrpkit
    from wrpkit.cli import main

    src = _copy_case(tmp_path, "1.16.0", "struct")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    wrpkit.upgrade(src, tmp_path / f"durable.{ext}")
    assert synced, "the default upgrade did not fsync"
    synced.clear()
    wrpkit.upgrade(src, tmp_path / f"fast.{ext}", durable=False)
    assert synced == []
    r = CliRunner().invoke(main, ["upgrade", "--no-fsync", str(src), str(tmp_path / f"cli.{ext}")])
    assert r.exit_code == 0, r.output
    assert synced == []
    want = (tmp_path / f"durable.{ext}").read_bytes()
    assert (tmp_path / f"fast.{ext}").read_bytes() == want and (tmp_path / f"cli.{ext}").read_bytes() == want
    if ext == "wrp":
        for stem in ("fast", "cli"):
            assert sorted(p.name for p in (tmp_path / f"{stem}_modules").iterdir()) == sorted(
                p.name for p in (tmp_path / "durable_modules").iterdir())
    assert wrpkit.open_capture(tmp_path / f"cli.{ext}").program.format_version == 18
    r = CliRunner().invoke(main, ["validate", str(tmp_path / f"cli.{ext}")])
    assert r.exit_code == 0, r.output
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
