"""Kernel ``printf`` reaches the user in every route that replays, as stock Warp's replay prints it.

A program written here (``tmp_path``) whose kernels print (``wp.printf`` inside a loop and an
IF, and ``print`` in a kernel) is captured with stock ``wp.capture_save`` and with
``wrpkit.capture``.  The truth is stock Warp's own replay of the same file
(``wp.capture_load`` + ``wp.capture_launch``) in a fresh process; every route's printed lines
are compared with it (in order: CPU threads run one after the other).  With ``--json``,
stdout is exactly one JSON object and the kernel's lines are on stderr.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proc_helpers import ROOT, TESTS_DIR, run

BIN = Path(sys.executable).parent
#: A line the kernels print (``tid 3 v 3.000000``) or ``print(y[i])`` (an integer-valued float: ``4``).
KERNEL_LINE = re.compile(r"^(tid \d+ v -?\d+\.\d+|-?\d+(\.\d+)?)$")

PROGRAM = '''
import sys

import numpy as np
import warp as wp

wp.config.quiet = True


@wp.kernel
def k_print(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    for j in range(2):
        if x[i] > 1.0:
            wp.printf("tid %d v %f\\n", i, x[i])
        y[i] = y[i] + x[i] * float(j)


@wp.kernel
def k_print_y(y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    if i % 2 == 0:
        print(y[i])


def main(path, how):
    x = wp.array(np.arange(6, dtype=np.float32), device="cpu")
    y = wp.zeros(6, dtype=wp.float32, device="cpu")
    wp.load_module(device="cpu")
    if how == "stock":
        with wp.ScopedCapture(device="cpu", force_module_load=False, apic=True) as cap:
            wp.launch(k_print, dim=6, inputs=[x, y])
            wp.launch(k_print_y, dim=6, inputs=[y])
        wp.capture_save(cap.graph, path, inputs={"x": x}, outputs={"y": y})
    else:
        import wrpkit

        with wrpkit.capture(device="cpu") as rec:
            wp.launch(k_print, dim=6, inputs=[x, y])
            wp.launch(k_print_y, dim=6, inputs=[y])
        rec.save(path, inputs={"x": x}, outputs={"y": y})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
'''

#: Stock Warp's replay: a marker line, then ``capture_launch`` REPEAT times (C stdio flushes at exit).
STOCK_REPLAY = '''
import sys

import warp as wp

wp.config.quiet = True
wp.init()
graph = wp.capture_load(sys.argv[1], device="cpu")
print("=== replay ===", flush=True)
for _ in range(int(sys.argv[2])):
    wp.capture_launch(graph)
'''


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return run(*cmd, env=_env(), **kw)


def _native_or_skip(engine: str) -> None:
    """``wrp trace`` and ``wrp profile``'s native engine is the C++ library, in the stepping process."""
    if engine == "native":
        from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

        if native_paths().library is None:
            pytest.skip("libwrp_replay is not built")


def kernel_lines(text: str) -> list:
    """The lines of ``text`` the kernels printed (notices and warnings on stderr are not)."""
    return [ln for ln in text.splitlines() if KERNEL_LINE.match(ln.strip())]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """``{"stock": .wrp saved by wp.capture_save, "wrpkit": .wrp saved by wrpkit.capture}``."""
    d = tmp_path_factory.mktemp("kernel_printf")
    (d / "prog.py").write_text(PROGRAM)
    (d / "stock_replay.py").write_text(STOCK_REPLAY)
    out = {}
    for how in ("stock", "wrpkit"):
        path = d / f"{how}.wrp"
        p = _run([sys.executable, d / "prog.py", path, how], cwd=d)
        if p.returncode and "LLVM ERROR" in p.stderr:  # seen once: a compile into Warp's shared kernel cache
            p = _run([sys.executable, d / "prog.py", path, how], cwd=d)
        assert p.returncode == 0, p.stderr
        out[how] = path
    return out


_truths: dict = {}


def truth(path: Path, repeat: int = 1) -> list:
    """The lines stock Warp's replay of ``path`` prints (``repeat`` launches), in a fresh process."""
    key = (str(path), repeat)
    if key not in _truths:
        p = _run([sys.executable, path.parent / "stock_replay.py", path, repeat], cwd=path.parent)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        lines = lines[lines.index("=== replay ===") + 1:]
        assert lines and all(KERNEL_LINE.match(ln) for ln in lines), lines
        _truths[key] = lines
    return _truths[key]


def test_truth_prints_every_thread_of_both_kernels(files):
    lines = truth(files["stock"])
    assert lines[:2] == ["tid 2 v 2.000000"] * 2 and lines.count("tid 5 v 5.000000") == 2
    assert lines[-3:] == ["0", "2", "4"]  # print(y[i]) of the even threads, after k_print
    assert truth(files["stock"], 3) != lines * 3  # y carries over: the second replay prints other values
    assert truth(files["wrpkit"]) == lines


def _head(stdout: str, expected: list) -> None:
    """The kernels' lines come first, exactly, and the command's own report after them."""
    lines = stdout.splitlines()
    assert lines[:len(expected)] == expected, stdout
    assert len(lines) > len(expected) and not KERNEL_LINE.match(lines[len(expected)].strip() or "x"), stdout


@pytest.mark.parametrize("how", ["stock", "wrpkit"])
@pytest.mark.parametrize("engine", ["python", "native"])
def test_wrp_replay_prints_what_stock_prints(files, how, engine, replayer):
    path = files[how]
    p = _run([BIN / "wrp", "replay", path, "--engine", engine])
    assert p.returncode == 0, p.stderr
    _head(p.stdout, truth(path))
    assert "time per replay" in p.stdout
    assert not kernel_lines(p.stderr)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_wrp_replay_repeat_prints_every_replay(files, engine, replayer):
    path = files["stock"]
    p = _run([BIN / "wrp", "replay", path, "--engine", engine, "--repeat", "2", "--warmup", "1"])
    assert p.returncode == 0, p.stderr
    _head(p.stdout, truth(path, 3))  # warmups are launches too, as Warp's


@pytest.mark.parametrize("engine", ["python", "native"])
def test_wrp_replay_json_keeps_stdout_one_object(files, engine, replayer):
    path = files["wrpkit"]
    p = _run([BIN / "wrp", "replay", path, "--engine", engine, "--json", "--repeat", "2"])
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)  # the whole of stdout
    assert report["ok"] is True and report["repeat"] == 2
    assert kernel_lines(p.stderr) == truth(path, 2)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_wrp_replay_with_inputs_and_outputs(files, engine, tmp_path, replayer):
    """Inputs and outputs go through memory files (the native engine starts wrp-replay afresh)."""
    import numpy as np  # noqa: PLC0415

    path = files["wrpkit"]
    np.save(tmp_path / "x.npy", np.array([3, 0, 0, 0, 0, 2], np.float32))
    p = _run([BIN / "wrp", "replay", path, "--engine", engine, "--input", f"x={tmp_path / 'x.npy'}",
              "--output", f"y={tmp_path / 'y.npy'}"])
    assert p.returncode == 0, p.stderr
    _head(p.stdout, ["tid 0 v 3.000000"] * 2 + ["tid 5 v 2.000000"] * 2 + ["3", "0", "0"])


def test_cli_runner_gets_the_lines_too(files):
    """A stdout without a file descriptor (click's test runner) gets them copied, in their place."""
    from click.testing import CliRunner  # noqa: PLC0415

    from wrpkit.cli.replay import replay  # noqa: PLC0415

    path = files["stock"]
    res = CliRunner().invoke(replay, [str(path), "--repeat", "2"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    _head(res.stdout, truth(path, 2))
    res = CliRunner().invoke(replay, [str(path), "--json"], catch_exceptions=False)
    assert res.exit_code == 0
    json.loads(res.stdout)
    assert kernel_lines(res.stderr) == truth(path)


@pytest.mark.parametrize("how", ["stock", "wrpkit"])
def test_wrp_replay_native_binary(files, how, replayer):
    path = files[how]
    p = _run([replayer, path])
    assert p.returncode == 0, p.stderr
    _head(p.stdout, truth(path))
    p = _run([replayer, path, "--json", "--repeat", "3"])
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)  # stdout is one JSON object: the kernel's lines went to stderr
    assert report["timings"]["count"] == 3
    assert kernel_lines(p.stderr) == truth(path, 3)


def test_wrp_replay_kernel_output_fd(files, tmp_path, replayer):
    """--kernel-output-fd N: the lines go to N, and nothing else does."""
    path = files["stock"]
    with open(tmp_path / "k.txt", "w") as k:
        p = subprocess.run([str(replayer), str(path), "--json", "--kernel-output-fd", str(k.fileno())],
                           capture_output=True, text=True, timeout=120, pass_fds=(k.fileno(),))
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)
    assert not kernel_lines(p.stderr)
    assert (tmp_path / "k.txt").read_text().splitlines() == truth(path)
    p = subprocess.run([str(replayer), str(path), "--kernel-output-fd", "987"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "--kernel-output-fd needs an open file descriptor" in p.stderr


def test_wrp_replay_json_error_stays_on_stdout(files, tmp_path, replayer):
    """A failure after the replay diverted the kernel output still prints its JSON error on stdout."""
    path = files["stock"]
    p = _run([replayer, path, "--json", "--output", f"nosuch={tmp_path / 'o.npy'}"])
    assert p.returncode != 0
    assert "error" in json.loads(p.stdout)


# The python engine's child takes more than 3 s on two cores: the full suite runs it.
@pytest.mark.parametrize("engine", [pytest.param("python", marks=pytest.mark.slow), "native"])
def test_wrp_trace(files, engine):
    _native_or_skip(engine)
    path = files["wrpkit"]
    p = _run([BIN / "wrp", "trace", path, "--engine", engine])
    assert p.returncode == 0, p.stderr
    _head(p.stdout, truth(path))
    p = _run([BIN / "wrp", "trace", path, "--engine", engine, "--json"])
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["ops"]
    assert kernel_lines(p.stderr) == truth(path)


# The python engine's child takes more than 3 s on two cores: the full suite runs it.
@pytest.mark.parametrize("engine", [pytest.param("python", marks=pytest.mark.slow), "native"])
def test_wrp_profile_shows_one_replay(files, engine):
    """Profiling replays the program many times over; the output of one replay (the first round's) is shown."""
    _native_or_skip(engine)
    path = files["stock"]
    p = _run([BIN / "wrp", "profile", path, "--engine", engine, "--repeat", "3", "--warmup", "1"])
    assert p.returncode == 0, p.stderr
    _head(p.stdout, truth(path))
    p = _run([BIN / "wrp", "profile", path, "--engine", engine, "--repeat", "2", "--json"])
    assert p.returncode == 0, p.stderr
    assert "kernels" in json.loads(p.stdout)
    assert kernel_lines(p.stderr) == truth(path)


API = '''
import contextlib
import io
import sys

import wrpkit

path = sys.argv[1]
prog = wrpkit.load(path, isolate=True)
print("=== isolated", flush=True)
prog.run(repeat=2)
print("=== again", flush=True)
prog.run(repeat=1)
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    prog.run(repeat=1, reset=True)
prog.close()
print("=== redirected", flush=True)
sys.stdout.write(buf.getvalue())
inproc = wrpkit.load(path)
print("=== run(isolate=True)", flush=True)
inproc.run(isolate=True)
print("=== in-process", flush=True)
inproc.run(repeat=1)
'''


@pytest.mark.slow  # more than 3 s on two cores: the full suite runs it
def test_python_api(files, tmp_path):
    """``wrpkit.load(...).run()`` prints as Warp does; a contained run forwards it to sys.stdout."""
    path = files["stock"]
    (tmp_path / "api.py").write_text(API)
    p = _run([sys.executable, tmp_path / "api.py", path])
    assert p.returncode == 0, p.stderr
    sections, name = {}, None
    for line in p.stdout.splitlines():
        if line.startswith("=== "):
            name = line[4:]
            sections[name] = []
        else:
            sections[name].append(line)
    three = truth(path, 3)
    once = truth(path)
    assert sections["isolated"] == truth(path, 2)
    assert sections["again"] == three[len(truth(path, 2)):]  # the program's state carries over
    assert sections["redirected"] == once  # reset: from the captured state; into the StringIO
    assert sections["run(isolate=True)"] == once
    # In-process, Warp prints through this process's C stdio (its buffer goes out at exit, after the last
    # marker): the second replay's lines, since run(isolate=True) wrote the first one's results back.
    assert sections["in-process"] == truth(path, 2)[len(once):]


CHILD_SIDE = '''
import os
import sys

import numpy as np
import warp as wp

from wrpkit.run.contain.child import KernelOutputShown

wp.config.quiet = False  # Warp's own messages on: they must not pass for the kernel's


@wp.kernel
def k(x: wp.array(dtype=wp.float32)):
    i = wp.tid()
    wp.printf("tid %d v %f\\n", i, x[i])


fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
shown = KernelOutputShown(fd)
with shown:
    x = wp.array(np.arange(3, dtype=np.float32), device="cpu")
    wp.load_module(device="cpu", recursive=False)
    print("a python print meanwhile")
    wp.launch(k, dim=3, inputs=[x], device="cpu")
shown.close()
os.write(1, b"stdout is back\\n")
'''


def test_warp_messages_are_not_forwarded(tmp_path):
    """In a child, only C stdio's stdout (the kernels) is diverted; Python-level output (Warp's
    "Module ... load on device ... took ..." lines) stays in the child's own output."""
    (tmp_path / "side.py").write_text(CHILD_SIDE)
    p = _run([sys.executable, tmp_path / "side.py", tmp_path / "k.txt"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "k.txt").read_text().splitlines() == [f"tid {i} v {i}.000000" for i in range(3)]
    assert "Module" in p.stderr and "load on device" in p.stderr and "a python print meanwhile" in p.stderr
    assert p.stdout == "stdout is back\n"


def test_regress_keeps_kernel_output_out_of_its_report(files, tmp_path, replayer):
    """``wrp regress`` runs cases side by side and reports verdicts: the kernels' lines are not shown
    (``wrp replay CASE`` shows them)."""
    import shutil  # noqa: PLC0415

    path = files["wrpkit"]
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(path, suite / "case.wrp")
    shutil.copytree(path.parent / f"{path.stem}_modules", suite / "case_modules")
    p = _run([BIN / "wrp", "regress", suite, "--update"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert (suite / "case_expected.npz").is_file()
    for extra in ([], ["--json"], ["--engine", "native"]):
        p = _run([BIN / "wrp", "regress", suite, *extra])
        assert p.returncode == 0, p.stdout + p.stderr
        assert not kernel_lines(p.stdout) and not kernel_lines(p.stderr), (p.stdout, p.stderr)


def test_a_crash_still_quotes_the_child_stderr(tmp_path):
    """With the kernels' output shown, what the child wrote to stderr is still the crash's ``stderr``
    (:func:`wrpkit.run.contain.spawn.output_tail`): ``wrp memcheck`` reads its guard's marker line there."""
    import io  # noqa: PLC0415

    from wrpkit.debug.common import open_program  # noqa: PLC0415
    from wrpkit.debug.isolation import run_in_child  # noqa: PLC0415
    from wrpkit.debug.memcheck import GUARD_BYTES  # noqa: PLC0415
    from wrpkit.run.replay.native_lib import find_memguard  # noqa: PLC0415

    guard = find_memguard()
    if guard is None:
        pytest.skip("libwrp_memguard is not built")
    path = tmp_path / "bug.wrp"
    p = _run([sys.executable, TESTS_DIR / "memcheck_program.py", "launch", 1, "wrpkit", path], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    seen = {}

    def crashed(crash, slot):
        seen["stderr"] = crash.stderr
        return {"fault": True}

    shown = io.StringIO()
    answer = run_in_child(open_program(path), "memcheck", {"device": "cpu", "engine": "python", "mode": 0,
                                                           "guard_bytes": GUARD_BYTES},
                          None, env={"LD_PRELOAD": str(guard)}, crashed=crashed, kernel_output=shown)
    assert answer == {"fault": True}
    assert "WRPKIT-MEMGUARD fault region=" in seen["stderr"]
    assert "WRPKIT-MEMGUARD" not in shown.getvalue()
