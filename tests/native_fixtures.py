"""Session fixtures of the tests of native/ (tests/native/test_native_*.py).

A pytest plugin (``pytest_plugins`` in tests/conftest.py), so that each
fixture is defined once and a build or a capture is made once per session
whichever test files run.  The project is built with CMake into a temporary
directory (and once more with WRP_SANITIZE=ON for the AddressSanitizer tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import programs  # the shared registry of real Warp programs (tests/programs.py)
from native_helpers import ANNOTATIONS_SCRIPT, Build, LEGACY, LOCAL, ROOT, cmake_build, convert_with_cli, run


@pytest.fixture(scope="session")
def native(tmp_path_factory) -> Build:
    bdir = cmake_build(tmp_path_factory, "native-build", "-DCMAKE_BUILD_TYPE=Release",
                       targets=["all", "wrpk-unpack", "sha256-check"])  # test tools are not part of `all`
    return Build(bdir, bdir / "native" / "wrp-replay", bdir / "native" / "libwrp_replay.so",
                 ROOT / "native" / "include")


@pytest.fixture(scope="session")
def asan_exe(tmp_path_factory) -> Path:
    # -O0 compiles faster; only the executable is needed.
    bdir = cmake_build(tmp_path_factory, "native-asan", "-DCMAKE_BUILD_TYPE=Debug", "-DWRP_SANITIZE=ON",
                       targets=["wrp-replay"])
    return bdir / "native" / "wrp-replay"


@pytest.fixture(scope="session")
def caps(tmp_path_factory) -> dict:
    """``{name: Path of its .wrp}`` for every program (the run's one capture cache) and this file's own."""
    d = tmp_path_factory.mktemp("native-captures")
    out = programs.cached_captures()
    for name, prog in LOCAL.items():
        programs.capture_to_file(prog, d / f"local_{name}.wrp")
        out[f"local_{name}"] = d / f"local_{name}.wrp"
    return out


@pytest.fixture(scope="session")
def annotations(native):
    """``annotations(signatures, digests) -> bytes`` of an Annotations FlatBuffer."""
    def make(signatures, digests=()):
        spec = {"signatures": signatures, "digests": [(f, sha.hex(), n) for f, sha, n in digests]}
        env = {**os.environ, "PYTHONPATH": str(native.dir / "python_fbs")}
        res = subprocess.run([sys.executable, "-c", ANNOTATIONS_SCRIPT], input=json.dumps(spec).encode(),
                             capture_output=True, env=env, check=True)
        return res.stdout

    return make


@pytest.fixture(scope="session")
def bundles(caps, tmp_path_factory) -> dict:
    """``{name: Path of X.wrpk}``: every capture of ``caps`` through ``wrp convert X.wrp X.wrpk``."""
    d = tmp_path_factory.mktemp("native-bundles")
    out = {name: d / f"{name}.wrpk" for name in caps}
    convert_with_cli([(caps[name], out[name]) for name in caps])
    return out


@pytest.fixture(scope="session")
def legacy_bundles(tmp_path_factory) -> dict:
    """``{fixture .wrp: its .wrpk}``, converted with ``wrp convert`` (in the fixture's own format)."""
    d = tmp_path_factory.mktemp("legacy-bundles")
    out = {src: d / f"{src.parent.name}-{src.stem}.wrpk" for src in LEGACY}
    convert_with_cli(list(out.items()))
    return out
