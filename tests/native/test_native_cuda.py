"""wrp-replay on CUDA: a clean error without a device, and replays that match
stock Warp where there is one.
"""

from __future__ import annotations

import os
import shutil
import struct

import numpy as np
import pytest

import warp as wp

import programs
from native_helpers import LOCAL, WARP_BIN, copy_capture, metadata_fields, npy_input, run

pytestmark = pytest.mark.slow  # every test here builds native/ with CMake first


def have_cuda() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return wp.get_cuda_device_count() > 0
    except Exception:  # noqa: BLE001
        return False


def cuda_variant(buf: bytes, arch=86) -> bytes:
    """The same graph claiming to be a CUDA capture (binary-only modules)."""
    f = metadata_fields(buf)  # before the header edit: the codec refuses a header and metadata that disagree
    b = bytearray(buf)
    b[24] = 0
    struct.pack_into("<I", b, 28, arch)
    struct.pack_into("<I", b, f["arch"], arch)
    for m in f["modules"]:
        struct.pack_into("<I", b, m["arch"], arch)
    return bytes(b)


@pytest.mark.skipif(have_cuda(), reason="a CUDA device is present")
def test_cuda_without_a_device_is_a_clean_error(native, caps, tmp_path):
    src = caps["local_saxpb"]
    path = copy_capture(src, tmp_path / "cuda", data=cuda_variant(src.read_bytes()))
    run(native.exe, path, "--list", check_rc=0)  # a valid CUDA file
    res = run(native.exe, path, "--device", "cuda:0", "--warp-lib-dir", WARP_BIN, check_rc=2)  # an absent device is a usage error, as in wrp replay
    assert "no CUDA device cuda:0" in res.stderr
    res = run(native.exe, path, "--device", "cpu", "--warp-lib-dir", WARP_BIN, check_rc=2)
    assert "captured for CUDA" in res.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not have_cuda(), reason="no CUDA device (nvidia-smi absent or no GPU)")
@pytest.mark.parametrize("name", sorted(LOCAL))
def test_cuda_replay_matches_stock_warp(native, tmp_path, name):
    prog = LOCAL[name]
    path = tmp_path / f"{name}.wrp"
    fresh = programs.capture_to_file(prog, path, device="cuda:0")
    inputs = {n: npy_input(fresh[n]) for n in prog.inputs}
    args = [path, "--device", "cuda:0", "--warp-lib-dir", WARP_BIN]
    for n, a in inputs.items():
        np.save(tmp_path / f"in_{n}.npy", a)
        args += ["--input", f"{n}={tmp_path / f'in_{n}.npy'}"]
    for n in prog.bindings:
        args += ["--output", f"{n}={tmp_path / f'out_{n}.npy'}"]
    run(native.exe, *args, env={**os.environ}, check_rc=0)
    graph = wp.capture_load(os.fspath(path), device="cuda:0")
    for n, a in inputs.items():
        graph.set_param(n, wp.array(a.view(fresh[n].numpy().dtype).reshape(fresh[n].numpy().shape),
                                    dtype=fresh[n].dtype, device="cuda:0"))
    wp.capture_launch(graph)
    for n in prog.bindings:
        out = wp.empty_like(fresh[n])
        graph.get_param(n, out)
        assert np.load(tmp_path / f"out_{n}.npy").tobytes() == out.numpy().tobytes(), n
