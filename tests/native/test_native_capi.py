"""The C API of libwrp_replay.so, driven from a C program, and the library
finding Warp relative to its install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from native_helpers import CLEAN_ENV, WARP_BIN, run

pytestmark = pytest.mark.slow  # every test here builds native/ with CMake first


C_SMOKE = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "wrp_replay.h"

/* Two threads, two programs: each replays its own program with its own
 * inputs; the library serializes the Warp calls. */
struct job { wrp_program *p; float base; int failures; };

static void *worker(void *arg) {
    struct job *j = (struct job *)arg; float x[16], y[16]; int it, i;
    for (it = 0; it < 200; it++) {
        for (i = 0; i < 16; i++) x[i] = j->base + (float)(it + i);
        if (wrp_program_set(j->p, "x", x, sizeof x) || wrp_program_run(j->p, 1) ||
            wrp_program_get(j->p, "y", y, sizeof y)) { j->failures++; continue; }
        for (i = 0; i < 16; i++) if (y[i] != x[i] * 3.0f + (float)i) j->failures++;
    }
    return NULL;
}

static void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb"); void *buf; long len;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END); len = ftell(f); fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)len); *n = fread(buf, 1, (size_t)len, f); fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    wrp_options o; wrp_program *p = NULL; wrp_binding_info info; size_t idx, n, wrp_n, mod_n, i;
    float x[16], y[16]; void *ptr; wrp_module_bytes mod; void *wrp_bytes;
    if (argc < 4) return 2;
    wrp_options_init(&o);
    if (wrp_program_open("/nonexistent.wrp", &o, &p) != WRP_ERR_INVALID_FILE || p) return 10;
    printf("open-error: %s\n", wrp_last_error());
    if (wrp_last_error_bytes() != 0) return 30;  /* not out of memory: no size */
    o.max_memory_bytes = 16;  /* below what the file declares: refused, nothing allocated */
    if (wrp_program_open(argv[1], &o, &p) != WRP_ERR_OUT_OF_MEMORY || p) return 31;
    printf("oom-bytes: %llu\n", (unsigned long long)wrp_last_error_bytes());
    printf("oom-error: %s\n", wrp_last_error());
    wrp_options_init(&o);
    if (wrp_program_open(argv[1], &o, &p) != WRP_OK) { printf("%s\n", wrp_last_error()); return 11; }
    if (wrp_last_error_bytes() != 0) return 32;  /* a call that succeeds clears it */
    n = wrp_program_num_bindings(p);
    for (i = 0; i < n; i++) {
        if (wrp_program_binding(p, i, &info) != WRP_OK) return 12;
        printf("binding %s %llu\n", info.name, (unsigned long long)info.size);
    }
    if (wrp_program_find_binding(p, "y", &idx) != WRP_OK || idx != 1) return 13;
    if (wrp_program_set(p, "x", x, 3) != WRP_ERR_INVALID_ARGUMENT) return 14;
    printf("size-error: %s\n", wrp_last_error());
    if (wrp_program_get(p, "nope", y, sizeof y) != WRP_ERR_INVALID_ARGUMENT) return 15;
    for (i = 0; i < 16; i++) x[i] = (float)i;
    if (wrp_program_set(p, "x", x, sizeof x) != WRP_OK) return 16;
    if (wrp_program_run(p, 2) != WRP_OK) { printf("%s\n", wrp_last_error()); return 17; }
    if (wrp_program_get(p, "y", y, sizeof y) != WRP_OK) return 18;
    for (i = 0; i < 16; i++) if (y[i] != x[i] * 3.0f + (float)i) return 19;
    if (wrp_program_data_ptr(p, "x", &ptr, &n) != WRP_OK || n != sizeof x) return 20;
    ((float *)ptr)[0] = 100.0f;
    if (wrp_program_run(p, 1) != WRP_OK || wrp_program_get(p, "y", y, sizeof y) != WRP_OK) return 21;
    if (y[0] != 300.0f) return 22;
    wrp_program_destroy(p);
    p = NULL;

    wrp_bytes = slurp(argv[1], &wrp_n);
    mod.filename = argv[3]; mod.data = slurp(argv[2], &mod_n); mod.size = mod_n;
    if (wrp_program_open_memory(wrp_bytes, wrp_n, &mod, 0, &o, &p) != WRP_ERR_INVALID_FILE) return 23;
    printf("missing-module: %s\n", wrp_last_error());
    if (wrp_program_open_memory(wrp_bytes, wrp_n, &mod, 1, &o, &p) != WRP_OK) { printf("%s\n", wrp_last_error()); return 24; }
    free(wrp_bytes); free((void *)mod.data);  /* the program keeps what it needs */
    if (wrp_program_set(p, "x", x, sizeof x) != WRP_OK || wrp_program_run(p, 1) != WRP_OK) return 25;
    if (wrp_program_get(p, "y", y, sizeof y) != WRP_OK || y[5] != 20.0f) return 26;
    wrp_program_destroy(p);
    wrp_program_destroy(NULL);
    {
        struct job jobs[2] = {{NULL, 0.0f, 0}, {NULL, 1000.0f, 0}};
        pthread_t t[2];
        for (i = 0; i < 2; i++) if (wrp_program_open(argv[1], &o, &jobs[i].p) != WRP_OK) return 27;
        for (i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, &jobs[i]);
        for (i = 0; i < 2; i++) pthread_join(t[i], NULL);
        for (i = 0; i < 2; i++) { if (jobs[i].failures) return 28; wrp_program_destroy(jobs[i].p); }
    }
    printf("ok %s\n", wrp_library_version());
    return 0;
}
"""


def compile_c_smoke(native, tmp_path, lib_dir: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "smoke.c"
    src.write_text(C_SMOKE)
    exe = tmp_path / "smoke"
    subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", str(native.include), str(src),
                    "-L", str(lib_dir), "-lwrp_replay", "-pthread", f"-Wl,-rpath,{lib_dir}", "-o", str(exe)], check=True)
    return exe


def test_c_api_from_c(native, caps, tmp_path):
    path = caps["local_saxpb"]
    module = next(path.with_name(path.stem + "_modules").iterdir())
    exe = compile_c_smoke(native, tmp_path, native.lib.parent)
    res = run(exe, path, module, module.name, env={**CLEAN_ENV, "WRP_WARP_LIB_DIR": str(WARP_BIN)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "open-error: cannot open file /nonexistent.wrp" in res.stdout
    # the bytes the refused open asked for, as a number and in the message: what the file declares (> 16)
    asked = int(next(ln for ln in res.stdout.splitlines() if ln.startswith("oom-bytes: ")).split()[1])
    said = next(ln for ln in res.stdout.splitlines() if ln.startswith("oom-error: "))
    assert asked > 16 and f"declares {asked} bytes" in said, (asked, said)
    assert "binding x 64" in res.stdout and "binding y 64" in res.stdout
    assert "size-error: binding \"x\" is 64 bytes, but 3 were given" in res.stdout
    assert "missing-module: module file " in res.stdout
    assert res.stdout.splitlines()[-1].startswith("ok ")


def test_library_finds_warp_relative_to_its_install(native, caps, tmp_path):
    # site-packages/wrpkit/_native/lib/libwrp_replay.so -> site-packages/warp/bin
    site = tmp_path / "site-packages"
    lib_dir = site / "wrpkit" / "_native" / "lib"
    lib_dir.mkdir(parents=True)
    shutil.copy2(native.lib, lib_dir / native.lib.name)
    os.symlink(WARP_BIN.parent, site / "warp")
    path = caps["local_saxpb"]
    module = next(path.with_name(path.stem + "_modules").iterdir())
    exe = compile_c_smoke(native, tmp_path, lib_dir)
    res = run(exe, path, module, module.name, env=CLEAN_ENV)
    assert res.returncode == 0, res.stdout + res.stderr
