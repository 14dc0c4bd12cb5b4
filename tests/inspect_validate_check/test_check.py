"""`wrp check`: the portability preflight and its lints, on real captures."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import warp as wp
from click.testing import CliRunner

from wrpkit.cli import main
from wrpkit.formats.container import open_capture
from wrpkit.atomic_writes import publish_wrp
from wrpkit.formats.wrp1 import iter_wrp1_chunks

from check_helpers import k_uses_grid_id, run_check, stock_grid_capture


def rewrite(src, dst, edit):
    """Write an edited copy of a capture (with its modules) to ``dst``."""
    with open_capture(src) as cap:
        modules = {k: bytes(v) for k, v in cap.module_files().items()}
        prog = cap.program
        edit(prog, modules)
        publish_wrp(dst, iter_wrp1_chunks(prog), modules)
    return dst


def failed(data):
    return {f["check"] for f in data["findings"] if f["status"] == "fail"}


def test_a_fresh_capture_is_loadable(small_capture):
    code, data = run_check(small_capture)
    assert code == 0 and data["loadable"], data
    assert not failed(data)


def test_wrong_device_family_is_not_loadable(small_capture):
    code, data = run_check(small_capture, "--device", "cuda:0")
    assert code == 2 and "device" in failed(data)  # the wrong device is a usage error, as in wrp replay
    fix = next(f["fix"] for f in data["findings"] if f["check"] == "device")
    assert "--device cpu" in fix


def test_other_warp_version_needs_a_recapture(small_capture, tmp_path):
    def edit(prog, modules):
        prog.warp_version = "1.18.0"

    path = rewrite(small_capture, tmp_path / "old.wrp", edit)
    code, data = run_check(path)
    assert code == 3 and "warp-version" in failed(data)  # another Warp version: exit 3, as in wrp replay
    msg = next(f for f in data["findings"] if f["check"] == "warp-version")
    assert "1.18.0" in msg["message"] and wp.config.version in msg["message"]
    assert "Recapture" in msg["fix"]


def test_missing_module_file(small_capture, tmp_path):
    dst = tmp_path / "g.wrp"
    shutil.copy(small_capture, dst)
    code, data = run_check(dst)  # no g_modules/ beside it
    assert code == 3 and "modules" in failed(data)


def test_kernel_symbol_renamed_to_a_libc_function_is_refused(small_capture, tmp_path):
    def edit(prog, modules):
        prog.kernels[0].forward_name = "free"

    code, data = run_check(rewrite(small_capture, tmp_path / "free.wrp", edit))
    assert code == 3 and "kernel-symbols" in failed(data)


def test_kernel_symbol_missing_from_its_object_is_refused(small_capture, tmp_path):
    def edit(prog, modules):
        prog.kernels[0].forward_name = "nope_0000_cpu_forward"

    code, data = run_check(rewrite(small_capture, tmp_path / "nope.wrp", edit))
    assert code == 3 and "kernel-symbols" in failed(data)


def test_lint_flags_a_hashgrid_id_passed_as_uint64(tmp_path):
    g, out, _grid = stock_grid_capture()
    path = tmp_path / "grid.wrp"
    wp.capture_save(g, str(path), outputs={"out": out})
    code, data = run_check(path)
    lint = [f for f in data["findings"] if f["check"] == "lint-pointer"]
    assert lint and lint[0]["status"] == "fail" and "k_uses_grid_id" in lint[0]["message"]
    # Numbered from 0 as `wrp inspect --ops` numbers the grid id argument (the kernel's first).
    assert "argument 0 holds" in lint[0]["message"]
    # It loads, but its replay dereferences a dangling pointer: the exit code wrp replay gives it.
    assert code == 3 and not data["loadable"]
    res = subprocess.run([str(Path(sys.executable).parent / "wrp"), "replay", str(path)], capture_output=True,
                         text=True)
    assert res.returncode == code and "argument 0 holds" in res.stderr


def _grid_capture_with_id(tmp_path, value: int):
    """The stock HashGrid capture with the grid's id rewritten to ``value``: ``(path, program)``."""
    from wrpkit.formats.wrp1 import decode_wrp1, encode_wrp1  # noqa: PLC0415

    g, out, _grid = stock_grid_capture()
    src = tmp_path / "grid.wrp"
    wp.capture_save(g, str(src), outputs={"out": out})
    prog = decode_wrp1(src.read_bytes())
    launch = next(op for op in prog.ops if hasattr(op, "value_data"))
    p = launch.params[0]
    assert p.value_size == 8
    data = bytearray(launch.value_data)
    data[p.value_offset:p.value_offset + 8] = value.to_bytes(8, "little")
    launch.value_data = bytes(data)
    path = tmp_path / "edited.wrp"
    path.write_bytes(encode_wrp1(prog))
    shutil.copytree(tmp_path / "grid_modules", tmp_path / "edited_modules")
    return path, prog


def _pointer_findings(tmp_path, value: int, replayer) -> tuple:
    """What wrpkit's lint and ``wrp-replay`` (the C++ twin) say of the grid id ``value``:
    ``(lint-pointer findings, wrp-replay --list exit code, its stderr)``."""
    import subprocess  # noqa: PLC0415

    from wrpkit.checks.check import lint_program  # noqa: PLC0415

    path, prog = _grid_capture_with_id(tmp_path, value)
    findings = [f for f in lint_program(prog) if f.check == "lint-pointer"]
    native = subprocess.run([str(replayer), str(path), "--list"], capture_output=True, text=True, timeout=120)
    return findings, native.returncode, native.stderr


# A brk heap starts on a random page, but where an object lies within its page is the same in
# every run of one program: a grid that lands on a page boundary (0x356cc000) does so every time.
@pytest.mark.parametrize("address", [0x356CCB80, 0x356CC000, 0x1_2340_0010, 0x55D15E5EF6C0, 0x7F3A2C001000])
def test_lint_flags_pointers_from_pie_and_non_pie_heaps(tmp_path, address, replayer):
    # The grid's id is an address of this process's heap: near 2^46 under a PIE
    # interpreter, below 2^32 under a non-PIE one (Debian's /usr/bin/python3 on
    # kernels that keep the legacy brk layout).  Rewrite it to each kind so that
    # both are checked whatever runs the tests, in Python and in wrp-replay.
    findings, code, stderr = _pointer_findings(tmp_path, address, replayer)
    assert len(findings) == 1 and f"{address:#x}" in findings[0].message
    assert code == 3 and f"{address:#x}" in stderr and "live process pointer" in stderr


@pytest.mark.parametrize("value", [1 << 24, 3 << 24, 255 << 24, 1 << 32, 5 << 40])
def test_lint_leaves_round_sizes_and_strides_alone(tmp_path, value, replayer):
    # An int64 size or stride such as 2^24 fills a whole 8-byte argument in the low
    # heap range, but it is a small odd number times a power of two, which an address
    # almost never is.
    findings, code, stderr = _pointer_findings(tmp_path, value, replayer)
    assert not findings and code == 0, stderr


def test_lint_leaves_floats_padded_with_zeros_alone(captures):
    # A float32 beside zero padding reads as a small 64-bit value (1.5f -> 0x3fc00000),
    # inside a non-PIE heap's range; it is not a pointer.
    from wrpkit.checks.check import lint_program  # noqa: PLC0415
    from wrpkit.formats.wrp1 import decode_wrp1  # noqa: PLC0415

    assert {"structs", "vecmat"} <= set(captures)
    for name, path in captures.items():
        prog = decode_wrp1(path.read_bytes())
        assert not [f for f in lint_program(prog) if f.check == "lint-pointer"], name


def test_lint_flags_kernel_overloads_sharing_one_record(captures):
    code, data = run_check(captures["overloads"])
    assert any(f["check"] == "lint-overloads" for f in data["findings"])


def test_check_on_garbage_is_a_clean_failure(tmp_path):
    bad = tmp_path / "x.wrp"
    bad.write_bytes(np.arange(100, dtype=np.uint8).tobytes())
    res = CliRunner().invoke(main, ["check", str(bad)])
    assert res.exit_code != 0 and "not a Warp capture" in res.output


def test_capture_layer_warns_about_live_pointers_when_the_capture_ends(tmp_path):
    import warnings  # noqa: PLC0415

    import wrpkit  # noqa: PLC0415
    from wrpkit.run.capture.recording import WrpLintWarning  # noqa: PLC0415

    grid = wp.HashGrid(4, 4, 4, device="cpu")
    out = wp.zeros(4, dtype=wp.float32, device="cpu")
    with pytest.warns(WrpLintWarning, match="k_uses_grid_id.*argument 0") as record:
        with wrpkit.capture(device="cpu") as rec:
            for _ in range(3):  # one warning, not one per launch
                wp.launch(k_uses_grid_id, dim=4, inputs=[grid.id, out], device="cpu")
        assert rec.graph is not None  # raised at the end of the block, before any save
    lint = [w for w in record if issubclass(w.category, WrpLintWarning)]
    assert len(lint) == 1 and lint[0].filename == __file__
    assert [f.check for f in rec.lint_findings] == ["lint-pointer"]
    # Saving refuses it, with the line to change, and writes nothing ...
    from wrpkit.errors import WrpValidationError  # noqa: PLC0415

    with pytest.raises(WrpValidationError, match="k_uses_grid_id.*argument 0") as refused:
        rec.save(tmp_path / "grid.wrp", outputs={"out": out})
    assert "wp.handle" in refused.value.hint and not (tmp_path / "grid.wrp").exists()
    # ... unless asked, and then it does not repeat what the end of the capture said.
    with warnings.catch_warnings():
        warnings.simplefilter("error", WrpLintWarning)
        rec.save(tmp_path / "grid.wrp", outputs={"out": out}, allow_raw_pointers=True)


def test_saving_a_plain_warp_capture_lints_it(tmp_path):
    import wrpkit  # noqa: PLC0415
    from wrpkit.run.capture.recording import WrpLintWarning  # noqa: PLC0415

    g, out, _grid = stock_grid_capture()
    with pytest.warns(WrpLintWarning, match="k_uses_grid_id.*argument 0"):
        wrpkit.save(g, tmp_path / "grid.wrp", outputs={"out": out}, allow_raw_pointers=True)


def test_clean_capture_saves_without_lint_warnings(tmp_path):
    import warnings  # noqa: PLC0415

    import wrpkit  # noqa: PLC0415
    from wrpkit.run.capture.recording import WrpLintWarning  # noqa: PLC0415

    out = wp.zeros(4, dtype=wp.float32, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", WrpLintWarning)
        with wrpkit.capture(device="cpu") as rec:
            wp.launch(k_uses_grid_id, dim=4, inputs=[wp.uint64(7), out], device="cpu")
        rec.save(tmp_path / "clean.wrp", outputs={"out": out})
    assert rec.lint_findings == []


def test_altered_module_fails_its_recorded_hash(tmp_path):
    import replay_cases as rc  # noqa: PLC0415

    dst = rc.copy_capture(rc.wrpkit_capture("views"), tmp_path)
    victim = next(dst.with_name(dst.stem + "_modules").iterdir())
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    code, out = run_check(dst)
    assert code == 3  # an altered module: the file cannot be used, as in wrp replay
    assert any(f["check"] == "modules" and "SHA-256" in f["message"] for f in out["findings"])


def test_unknown_device_is_a_usage_error(small_capture):
    res = CliRunner().invoke(main, ["check", str(small_capture), "--device", "tpu"])
    assert res.exit_code == 2 and "unknown device" in res.output
