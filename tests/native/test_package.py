"""The C API as a package (issue 24): a small C++ consumer found through pkg-config and through CMake.

The consumer opens a capture made with stock Warp at test time, replays it and
prints one output value; it is built twice, once with
``pkg-config --cflags --libs wrp_replay`` and once with ``find_package(wrpkit)``,
from the files ``pip install .`` installed beside ``libwrp_replay.so``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import wrpkit

pytestmark = pytest.mark.slow  # builds a C++ consumer with CMake and pkg-config

wp.config.quiet = True
NATIVE = Path(wrpkit.__file__).resolve().parent / "_native"
INSTALLED = list(Path(sys.prefix).glob("lib/python*/site-packages/wrpkit/_native"))

CONSUMER = r"""
#include <cstdio>
#include <vector>
#include "wrp_replay.h"

int main(int argc, char** argv)
{
    wrp_options o;
    wrp_options_init(&o);
    o.device = "cpu";
    wrp_program* p = nullptr;
    if (wrp_program_open(argv[1], &o, &p) != WRP_OK) {
        std::printf("open failed: %s\n", wrp_last_error());
        return 1;
    }
    std::vector<float> y(64);
    if (wrp_program_run(p, 1) != WRP_OK || wrp_program_get(p, "y", y.data(), y.size() * 4) != WRP_OK) {
        std::printf("run failed: %s\n", wrp_last_error());
        return 2;
    }
    std::printf("bindings %zu y[3] %g\n", wrp_program_num_bindings(p), y[3]);
    wrp_program_destroy(p);
    return 0;
}
"""

CMAKELISTS = """
cmake_minimum_required(VERSION 3.18)
project(consumer LANGUAGES CXX)
find_package(wrpkit 0.1 REQUIRED)
add_executable(consumer consumer.cpp)
target_link_libraries(consumer PRIVATE wrpkit::wrp_replay)
set_target_properties(consumer PROPERTIES BUILD_RPATH "${wrpkit_INCLUDE_DIRS}/../lib")
"""


@wp.kernel
def k_triple(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = x[i] * 3.0


def _prefix() -> Path:
    for p in [NATIVE, *INSTALLED]:
        if (p / "lib" / "pkgconfig" / "wrp_replay.pc").is_file():
            return p
    pytest.skip("the C API package files are not installed (pip install .)")


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    x = wp.array(np.arange(64, dtype=np.float32), device="cpu")
    y = wp.zeros(64, dtype=wp.float32, device="cpu")
    wp.capture_begin(device="cpu", apic=True)
    wp.launch(k_triple, dim=64, inputs=[x, y], device="cpu")
    graph = wp.capture_end(device="cpu")
    path = tmp_path_factory.mktemp("pkg") / "triple.wrp"
    wp.capture_save(graph, str(path), inputs={"x": x}, outputs={"y": y})
    return path


def _run(exe: Path, capture: Path) -> str:
    env = dict(os.environ, WRP_WARP_LIB_DIR=str(Path(wp.__file__).parent / "bin"))
    proc = subprocess.run([str(exe), str(capture)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_consumer_built_with_pkg_config(capture, tmp_path):
    if shutil.which("pkg-config") is None or shutil.which("c++") is None:
        pytest.skip("pkg-config or a C++ compiler is missing")
    prefix = _prefix()
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "wrp_replay"], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    assert any(f.startswith("-I") for f in flags) and "-lwrp_replay" in flags
    (tmp_path / "consumer.cpp").write_text(CONSUMER)
    exe = tmp_path / "consumer"
    subprocess.run(["c++", "-std=c++17", str(tmp_path / "consumer.cpp"), "-o", str(exe), *flags], check=True,
                   capture_output=True, text=True, timeout=300)
    assert _run(exe, capture).strip() == "bindings 2 y[3] 9"


def test_a_consumer_built_with_cmake_find_package(capture, tmp_path):
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        pytest.skip("cmake or a C++ compiler is missing")
    prefix = _prefix()
    src = tmp_path / "src"
    src.mkdir()
    (src / "consumer.cpp").write_text(CONSUMER)
    (src / "CMakeLists.txt").write_text(CMAKELISTS)
    build = tmp_path / "build"
    cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}"],
                         capture_output=True, text=True, timeout=300)
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    bld = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True, timeout=300)
    assert bld.returncode == 0, bld.stdout + bld.stderr
    assert _run(build / "consumer", capture).strip() == "bindings 2 y[3] 9"
