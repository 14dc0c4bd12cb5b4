"""Opt-in: regenerate the legacy WRP1 fixtures end to end and compare with the committed ones.

Runs ``tools/make_legacy_fixtures.py`` into a temporary directory. That installs
old ``warp-lang`` wheels from PyPI into throw-away venvs and compiles kernels,
so it is slow and needs the network: it only runs when ``WRP_REGEN_LEGACY=1``.
``WRP_REGEN_RELEASES`` (space or comma separated, default ``1.18.0``) picks the
fixture folders: releases, or ``format13`` (Warp 1.15.0 captures rewritten to
format 13; the script fails unless 1.15.0 replays them as it replays its own
format-14 files). ``WRP_REGEN_VENV_CACHE`` may name a folder in which to keep
the venvs between runs.

Checks, per folder: the Warp version, the format, the case list (and the list
of absent cases) equal the committed manifest's; every regenerated ``.wrp``
starts with the magic ``WRP1`` and carries the committed format version as the
u32 at byte 4; a rewritten (format13) case dropped as many tail bytes as the
committed one.
Capture-time pointers are baked into launch value blobs, so the files are not
compared byte for byte. Does not import ``wrpkit``.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
from proc_helpers import ROOT

REPO = ROOT
SCRIPT = REPO / "tools" / "make_legacy_fixtures.py"
FIXTURES = REPO / "tests" / "fixtures" / "legacy"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    os.environ.get("WRP_REGEN_LEGACY") != "1",
    reason="slow, needs PyPI: set WRP_REGEN_LEGACY=1 to regenerate the legacy fixtures "
    "(WRP_REGEN_RELEASES picks the releases, default 1.18.0)",
)]


def _releases() -> list[str]:
    raw = os.environ.get("WRP_REGEN_RELEASES", "1.18.0")
    return [r for r in raw.replace(",", " ").split() if r]


@pytest.mark.parametrize("release", _releases())
def test_regenerate_legacy_fixtures(release, tmp_path):
    committed = FIXTURES / release / "manifest.json"
    if not committed.is_file():
        pytest.skip(f"no committed fixtures for release {release} ({committed} is missing)")
    cmd = [sys.executable, str(SCRIPT), "--release", release, "--out", str(tmp_path)]
    if os.environ.get("WRP_REGEN_VENV_CACHE"):
        cmd += ["--venv-cache", os.environ["WRP_REGEN_VENV_CACHE"]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"

    want = json.loads(committed.read_text())
    got = json.loads((tmp_path / release / "manifest.json").read_text())
    assert got["warp_version"] == want["warp_version"]
    assert got["format_version"] == want["format_version"]
    assert sorted(got["cases"]) == sorted(want["cases"])
    assert sorted(got["absent"]) == sorted(want["absent"])
    for name, case in got["cases"].items():
        data = (tmp_path / release / case["wrp"]).read_bytes()
        assert data[:4] == b"WRP1", f"{name}: bad magic {data[:4]!r}"
        version = struct.unpack_from("<I", data, 4)[0]
        assert version == want["cases"][name]["format_version"], f"{name}: format {version}"
        if "rewritten_from" in want["cases"][name]:
            removed = want["cases"][name]["rewritten_from"]["bsr_transpose_tail_bytes_removed"]
            assert case["rewritten_from"]["bsr_transpose_tail_bytes_removed"] == removed, name
        for suffix in ("inputs_file", "expected_file"):
            assert (tmp_path / release / case[suffix]).is_file(), f"{name}: {case[suffix]} missing"
