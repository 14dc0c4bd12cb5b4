"""Run each Python decoder's coverage-guided fuzz target for a few seconds (atheris).

The corpus is seeded with real captures and their hostile variants (and their
.wrpk / .json forms).  A longer run is documented in bench/FUZZING.md.  The
runs so far found no input that escapes as anything but a WrpError; any
future finding is kept as a regression test beside these.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hostile
import programs
from wrpkit.formats.convert import convert
from proc_helpers import TESTS_DIR

pytestmark = pytest.mark.slow  # fuzzes each decoder for a few seconds

pytest.importorskip("atheris", reason="atheris is not installed (pip install '.[test]')")

HERE = TESTS_DIR
SECONDS = int(os.environ.get("WRPKIT_FUZZ_SECONDS", "5"))


@pytest.fixture(scope="module")
def corpus(captures, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    seeds = {"wrp1": root / "wrp1", "wrpk": root / "wrpk", "json": root / "json", "signature": root / "signature"}
    for d in seeds.values():
        d.mkdir()
    for name in ("views", "capture_while", "scalars"):
        src = captures[name]
        (seeds["wrp1"] / f"{name}.wrp").write_bytes(src.read_bytes())
        convert(src, root / f"{name}.wrpk")
        convert(src, root / f"{name}.json", include_modules=False)
        (seeds["wrpk"] / f"{name}.wrpk").write_bytes((root / f"{name}.wrpk").read_bytes())
        (seeds["json"] / f"{name}.json").write_bytes((root / f"{name}.json").read_bytes())
    # A step loop: repeated launch records, which the shared decode turns into one object.
    programs.capture_to_file(programs.make_big(launches=20, region_bytes=4096), root / "loop.wrp")
    (seeds["wrp1"] / "loop.wrp").write_bytes((root / "loop.wrp").read_bytes())
    for v in hostile.generate(captures["views"], root / "hostile"):
        if v.path.is_file() and not v.path.is_symlink() and v.category in ("bitflip", "huge", "op-size", "nesting"):
            (seeds["wrp1"] / v.name).write_bytes(v.path.read_bytes())
    _signature_seeds(captures["views"], root, seeds["signature"])
    return seeds


def _signature_seeds(capture: Path, root: Path, out: Path) -> None:
    """A real signature of a capture (key made by openssl, signed by wrp sign) and its statement."""
    import base64  # noqa: PLC0415
    import json  # noqa: PLC0415
    import shutil  # noqa: PLC0415

    from wrpkit.formats.signing import sign_capture  # noqa: PLC0415

    key = root / "key.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)], check=True)
    cap = root / "signed" / capture.name
    cap.parent.mkdir()
    shutil.copyfile(capture, cap)
    shutil.copytree(capture.with_name(capture.stem + "_modules"), cap.with_name(capture.stem + "_modules"))
    bundle = sign_capture(cap, key, kind="wrp").signature.read_bytes()
    (out / "bundle.sig").write_bytes(bundle)
    (out / "statement.json").write_bytes(base64.b64decode(json.loads(bundle)["dsseEnvelope"]["payload"]))


@pytest.mark.parametrize("target", ["wrp1", "wrpk", "wrpk-manifest", "json", "signature"])
def test_fuzz_target_finds_nothing(corpus, target, tmp_path):
    work = tmp_path / "corpus"
    work.mkdir()
    cmd = [sys.executable, str(HERE / "fuzz_python.py"), target, f"-max_total_time={SECONDS}", "-rss_limit_mb=4096",
           "-timeout=10", f"-artifact_prefix={tmp_path}/", str(work), str(corpus[target.split("-")[0]])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SECONDS + 120,
                          env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    tail = proc.stderr[-3000:]
    assert proc.returncode == 0, f"fuzzer found a failure:\n{tail}"
    assert "Done" in proc.stderr and "runs in" in proc.stderr, tail
