"""Every command keeps the same promises (issue 23, items 2-4, 6 and 7), each tried as a user would.

The exit-code table itself is tests/cli/test_exit_matrix.py; the compatibility
suite tests/compat/test_warp_compat.py.  Here: outputs that land, quiet CPU
commands, stock files read well, the small items, and bundles and JSON files
that get one verdict from both validators.  All on captures stock Warp makes
at test time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import warp as wp
from wrpkit.errors import EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, EXIT_USAGE
# ``wrp inspect --kernels`` imports this file on its own (below), outside pytest: it finds tests/ itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from proc_helpers import LEGACY_FIXTURES, ROOT, wrp_module  # noqa: E402

LEGACY = LEGACY_FIXTURES / "1.16.0"
CUDA_WARNING = "Could not find or load the NVIDIA CUDA driver"


#: ``python -m wrpkit.cli ARGS`` in a fresh process (proc_helpers.wrp_module), given 10 minutes.
wrp = partial(wrp_module, timeout=600)


@wp.kernel
def _energy_k(x: wp.array(dtype=wp.vec3), energy: wp.array(dtype=float)):
    i = wp.tid()
    energy[i] = wp.length(x[i])


@pytest.fixture(scope="module")
def energy(tmp_path_factory) -> Path:
    """A stock capture_save with one input (x: vec3) and one output-only binding (energy)."""
    d = tmp_path_factory.mktemp("energy")
    x = wp.array(np.arange(24, dtype=np.float32).reshape(8, 3), dtype=wp.vec3, device="cpu")
    e = wp.zeros(8, dtype=float, device="cpu")
    y = wp.zeros(8, dtype=float, device="cpu")
    wp.load_module(device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True, force_module_load=False) as cap:
        wp.launch(_energy_k, dim=8, inputs=[x, e], device="cpu")
        wp.launch(_energy_k, dim=8, inputs=[x, y], device="cpu")
    # inputs then outputs, as Warp writes them: x, y, y, energy -> x input, y both, energy output.
    wp.capture_save(cap.graph, str(d / "energy.wrp"), inputs={"x": x, "y": y}, outputs={"y": y, "energy": e})
    return d / "energy.wrp"


# ---------------------------------------------------------------------------
# 2. Outputs land or nothing is written
# ---------------------------------------------------------------------------


def test_export_runtime_of_the_readme_works_on_a_fresh_tree(tmp_path):
    p = subprocess.run([sys.executable, "-m", "wrpkit.cli", "export-runtime", "dist/replayer"], cwd=tmp_path,
                       capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "dist" / "replayer" / "wrp-replay").is_file()


def test_trace_dump_to_a_read_only_place_fails_before_the_trace_runs(energy, tmp_path):
    ro = Path("/sys") if os.geteuid() == 0 else tmp_path / "ro"
    if os.geteuid() != 0:
        ro.mkdir()
        ro.chmod(0o555)
    t0 = time.monotonic()
    p = wrp("trace", energy, "--dump", ro / "steps")
    assert p.returncode == 1, p.stderr
    assert "cannot" in p.stderr and "internal error" not in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    # Refused before any replay: the trace's own child (a Warp start and a load) never ran.
    assert time.monotonic() - t0 < 30


def test_convert_refuses_a_json_edit_that_makes_the_file_invalid(energy, tmp_path):
    js = tmp_path / "e.json"
    assert wrp("convert", energy, js).returncode == 0
    data = json.loads(js.read_text())
    data["regions"][0]["size"] = 200 << 30  # "a region edited to 200 GiB"
    js.write_text(json.dumps(data))
    out = tmp_path / "out.wrp"
    p = wrp("convert", js, out)
    assert p.returncode == EXIT_INVALID, (p.returncode, p.stderr)
    assert "region" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not out.exists() and not (tmp_path / "out_modules").exists()


def test_convert_of_a_json_without_modules_is_one_verdict(energy, tmp_path):
    """`--no-modules` JSON: convert and validate agree (3: the file is incomplete)."""
    js = tmp_path / "n.json"
    assert wrp("convert", energy, js, "--no-modules").returncode == 0
    assert wrp("convert", js, tmp_path / "n.wrp").returncode == EXIT_INVALID
    assert wrp("validate", js).returncode == EXIT_INVALID


# ---------------------------------------------------------------------------
# 3. Quiet and device-honest
# ---------------------------------------------------------------------------


def test_slice_is_quiet_and_refuses_a_device_this_machine_lacks(energy, tmp_path):
    p = wrp("slice", energy, "--ops", "1:2", "-o", tmp_path / "s.wrp")
    assert p.returncode == 0, p.stderr
    assert CUDA_WARNING not in p.stderr and "Warp 1.19" not in p.stdout, (p.stdout, p.stderr)
    if wp.get_cuda_device_count() == 0:
        p = wrp("slice", energy, "--ops", "0:1", "-o", tmp_path / "c.wrp", "--device", "cuda:0")
        assert p.returncode == EXIT_USAGE, p.stderr
        assert not (tmp_path / "c.wrp").exists()


# ---------------------------------------------------------------------------
# 4. Stock files read well
# ---------------------------------------------------------------------------


def test_inspect_states_stock_roles_from_the_save_order(energy):
    p = wrp("inspect", energy, "--json")
    rows = {b["name"]: (b["input"], b["output"]) for b in json.loads(p.stdout)["bindings"]}
    assert rows == {"x": (True, False), "y": (True, True), "energy": (False, True)}, rows


def test_replay_gives_no_input_notice_for_an_output_only_binding_and_never_wraps(energy, tmp_path):
    p = wrp("replay", energy, env=dict(os.environ, COLUMNS="80"))
    assert p.returncode == 0, p.stderr
    assert "'energy'" not in p.stderr, p.stderr
    notices = [ln for ln in p.stderr.splitlines() if ln.startswith("notice:")]
    assert len(notices) == 2  # x and y, each on one unbroken line
    assert all("it holds" in ln for ln in notices), p.stderr


@wp.kernel
def _four_k(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float),
            d: wp.array(dtype=float)):
    i = wp.tid()
    d[i] = a[i] + b[i] * c[i]


def test_replay_says_once_what_many_unset_bindings_hold(tmp_path):
    """A stock capture names every array it was given: more than two left unset get one notice naming them
    all, not a line each; --json still lists what each holds."""
    arrays = {n: wp.full(16, float(k + 1), dtype=float, device="cpu") for k, n in enumerate("abcd")}
    wp.load_module(device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True, force_module_load=False) as cap:
        wp.launch(_four_k, dim=16, inputs=list(arrays.values()), device="cpu")
    wp.capture_save(cap.graph, str(tmp_path / "four.wrp"), outputs=arrays)  # roles not recorded
    p = wrp("replay", tmp_path / "four.wrp")
    assert p.returncode == 0, p.stderr
    notices = [ln for ln in p.stderr.splitlines() if ln.startswith("notice:")]
    assert len(notices) == 1, p.stderr
    assert "4 bindings were not given as inputs: 'a', 'b', 'c' and 'd'" in notices[0], notices
    assert "captured value" in notices[0] and "does not record which are inputs" in notices[0], notices
    js = json.loads(wrp("replay", tmp_path / "four.wrp", "--json").stdout)
    assert sorted(js["unset_inputs"]) == ["a", "b", "c", "d"] and all(
        v.startswith("the captured value (64 bytes") for v in js["unset_inputs"].values()), js["unset_inputs"]
    # one given: the three others are still one notice
    np.save(tmp_path / "a.npy", np.zeros(16, dtype=np.float32))
    p = wrp("replay", tmp_path / "four.wrp", "--input", f"a={tmp_path / 'a.npy'}")
    notices = [ln for ln in p.stderr.splitlines() if ln.startswith("notice:")]
    assert p.returncode == 0 and len(notices) == 1 and "3 bindings" in notices[0] and "'a'" not in notices[0], \
        p.stderr


@wp.kernel
def _gather_k(x: wp.indexedarray(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * 2.0


def test_inspect_names_an_unbound_index_buffer_after_the_array_it_indexes(tmp_path):
    """An indexedarray's index buffer that no binding names is called after the argument it indexes, with or
    without the kernels' source (before, "region N" beside the data's "arg0")."""
    data = wp.array(np.arange(32, dtype=np.float32), device="cpu")
    idx = wp.array(np.arange(0, 32, 4, dtype=np.int32), device="cpu")
    out = wp.zeros(8, dtype=float, device="cpu")
    wp.load_module(device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True, force_module_load=False) as cap:
        wp.launch(_gather_k, dim=8, inputs=[wp.indexedarray(data, [idx]), out], device="cpu")
    wp.capture_save(cap.graph, str(tmp_path / "gather.wrp"), outputs={"out": out})
    regions = json.loads(wrp("inspect", tmp_path / "gather.wrp", "--json").stdout)["regions"]
    names = sorted(r["name"] for r in regions)
    assert names == ["arg0", "arg0 indices", "out"], names
    typed = json.loads(wrp("inspect", tmp_path / "gather.wrp", "--json", "--kernels", __file__).stdout)["regions"]
    assert sorted(r["name"] for r in typed) == ["out", "x", "x indices"], typed


@wp.kernel
def _spread_k(x: wp.array(dtype=wp.vec3), energy: wp.array(dtype=float)):
    i = wp.tid()
    energy[i] = wp.length(x[i]) * 1.0e6 - 2.0e6


def test_replay_table_of_long_arrays_fits_80_columns_without_breaking_a_shape_or_dtype(tmp_path):
    """Wide numbers and a 7-digit shape: the heavy table needs 85 columns; at 80 no token may fold."""
    n = 1 << 20
    x = wp.array(np.random.default_rng(3).standard_normal((n, 3)).astype(np.float32), dtype=wp.vec3,
                 device="cpu")
    e = wp.zeros(n, dtype=float, device="cpu")
    wp.load_module(device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True, force_module_load=False) as cap:
        wp.launch(_spread_k, dim=n, inputs=[x, e], device="cpu")
    wp.capture_save(cap.graph, str(tmp_path / "spread.wrp"), inputs={"x": x}, outputs={"energy": e})
    p = wrp("replay", tmp_path / "spread.wrp", "--dtype", "x=vec3f", "--dtype", "energy=float32",
            env=dict(os.environ, COLUMNS="80"))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(map(len, lines)) <= 80, p.stdout
    rows = {ln.split()[0]: ln for ln in lines[lines.index("outputs"):] if ln.split()[:1] in (["x"], ["energy"])}
    assert f"({n},)" in rows["energy"] and "float32" in rows["energy"], p.stdout
    assert "vec3f" in rows["x"] and f"({n},)" in rows["x"], p.stdout
    assert len(rows["energy"].split()) == 8, p.stdout  # binding, shape, dtype, 5 numbers: one line


def test_a_stock_capture_without_bindings_says_why_it_shows_no_outputs(tmp_path):
    a = wp.zeros(8, dtype=float, device="cpu")
    e = wp.zeros(8, dtype=float, device="cpu")
    wp.load_module(device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True, force_module_load=False) as cap:
        wp.launch(_energy_k, dim=8, inputs=[wp.zeros(8, dtype=wp.vec3, device="cpu"), e], device="cpu")
    wp.capture_save(cap.graph, str(tmp_path / "plain.wrp"))  # no inputs= or outputs=: the common stock save
    del a
    p = wrp("replay", tmp_path / "plain.wrp", "--output", tmp_path / "out.npz")
    assert p.returncode == 0, p.stderr
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("warning:")]
    assert len(said) == 1 and "names no bindings" in said[0] and "capture_save(graph, path, inputs=" in said[0], \
        p.stderr
    assert "outputs\nnone" in p.stdout and "binding" not in p.stdout, p.stdout  # no headers over nothing
    assert np.load(tmp_path / "out.npz").files == []
    js = json.loads(wrp("replay", tmp_path / "plain.wrp", "--json").stdout)
    assert js["outputs"] == {} and any("names no bindings" in w for w in js["warnings"]), js
    assert "Bindings\nnone" in wrp("inspect", tmp_path / "plain.wrp").stdout


def test_inspect_of_a_warp_116_file_shows_its_producer():
    p = wrp("inspect", LEGACY / "saxpy.wrp")
    assert "Warp 1.16.0 or 1.17.0" in p.stdout, p.stdout
    js = json.loads(wrp("inspect", LEGACY / "saxpy.wrp", "--json").stdout)
    assert js["warp_version"] == "" and "1.16.0" in js["producer"]


# ---------------------------------------------------------------------------
# 7. The small items
# ---------------------------------------------------------------------------


def test_upgrade_of_a_current_file_is_no_error(energy, tmp_path):
    p = wrp("upgrade", energy, tmp_path / "u.wrp")
    assert p.returncode == EXIT_OK and "already format 18" in p.stdout, p.stdout + p.stderr
    assert not (tmp_path / "u.wrp").exists()
    p = wrp("upgrade", energy, tmp_path / "batch" / "u.wrp", "--copy-current")
    assert p.returncode == EXIT_OK, p.stderr
    assert (tmp_path / "batch" / "u.wrp").read_bytes() == energy.read_bytes()


def test_upgrade_names_a_collision_policy_only_where_collisions_exist(tmp_path):
    p = wrp("upgrade", LEGACY / "saxpy.wrp", tmp_path / "s.wrp")
    assert p.returncode == 0, p.stderr
    assert "collision policy" not in p.stdout, p.stdout
    capture = (tmp_path / "s.wrp").stat().st_size
    from wrpkit.cli.output import size  # noqa: PLC0415

    assert f"s.wrp (wrp, format 18 for Warp {wp.config.version}, {size(capture)};" in p.stdout, p.stdout
    p = wrp("upgrade", LEGACY_FIXTURES / "1.14.0" / "saxpy.wrp", tmp_path / "t.wrp")
    assert p.returncode == 0 and "collision policy: producer" in p.stdout, p.stdout + p.stderr


def test_a_misspelt_binding_gets_a_did_you_mean(energy, tmp_path, replayer):
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((8, 3), np.float32))
    p = wrp("replay", energy, "--input", f"enrgy={x}")
    assert p.returncode == EXIT_USAGE and "did you mean 'energy'" in p.stderr, p.stderr
    p = subprocess.run([str(replayer), str(energy), f"--input=X={x}"], capture_output=True, text=True)
    assert p.returncode == EXIT_USAGE and 'did you mean "x"' in p.stderr, p.stderr


@pytest.mark.slow
def test_wrp_replay_names_both_dtypes_of_a_wrong_input(tmp_path, replayer):
    """A float64 array for a float32 binding of a file with a signature (wrpkit.capture)."""
    import wrpkit  # noqa: PLC0415

    x = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    e = wp.zeros(8, dtype=float, device="cpu")

    @wp.kernel
    def twice(a: wp.array(dtype=float), b: wp.array(dtype=float)):
        i = wp.tid()
        b[i] = 2.0 * a[i]

    wp.load_module(device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(twice, dim=8, inputs=[x, e], device="cpu")
    rec.save(str(tmp_path / "t.wrp"), inputs={"a": x}, outputs={"b": e})
    bad = tmp_path / "a64.npy"
    np.save(bad, np.arange(8, dtype=np.float64))
    p = subprocess.run([str(replayer), str(tmp_path / "t.wrp"), f"--input=a={bad}"], capture_output=True, text=True)
    assert p.returncode == EXIT_USAGE, p.stderr
    assert "<f8" in p.stderr and "float32" in p.stderr, p.stderr
    q = wrp("replay", tmp_path / "t.wrp", "--input", f"a={bad}")
    assert q.returncode == EXIT_USAGE and "float64" in q.stderr and "float32" in q.stderr, q.stderr


@pytest.mark.slow
def test_the_timeout_hint_names_the_replay_count(energy):
    p = wrp("replay", energy, "--repeat", "100000000", "--timeout", "2")
    assert p.returncode == 124, p.stderr
    assert "100000000 replays" in p.stderr and "--repeat" in p.stderr, p.stderr


@pytest.mark.slow
def test_wrp_replay_says_it_was_interrupted(tmp_path, replayer):
    """Ctrl-C during a long replay: one line on stderr, exit 130 (as wrp's)."""
    f = _long_capture(tmp_path)
    proc = subprocess.Popen([str(replayer), str(f), "--repeat", "100000000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, (proc.returncode, err)
    assert "interrupted" in err, err


def _long_capture(tmp_path: Path) -> Path:
    subprocess.run([sys.executable, str(ROOT / "samples" / "saxpy.py"), str(tmp_path / "s")], check=True,
                   capture_output=True)
    return tmp_path / "s" / "saxpy.wrp"


def test_replay_finds_wrp_replay_in_the_package_without_path(tmp_path):
    """cli/replay.py looked in wrpkit/cli/_native/bin, a folder that does not exist; PATH hid it."""
    from wrpkit.run.replay import engines  # noqa: PLC0415

    pkg_bin = Path(engines.__file__).resolve().parent.parent / "_native" / "bin" / "wrp-replay"
    if not pkg_bin.is_file():
        pytest.skip("this wrpkit is not an installed wheel (no _native/bin)")
    code = ("import sys; sys.executable = '/nonexistent/python'; "
            "from wrpkit.run.replay.engines import native_paths; print(native_paths().require_replayer())")
    env = {k: v for k, v in os.environ.items() if k not in ("WRP_REPLAY", "PYTHONPATH")} | {"PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip()) == pkg_bin


@wp.kernel
def _doubled_k(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.float32)):
    i = wp.tid()
    b[i] = a[i] * 2.0


@pytest.mark.slow
def test_a_kernels_file_that_parses_its_arguments_at_import_sees_none_of_wraps(tmp_path):
    """A script with argparse at module level, as many are: --kernels runs it as `python FILE` would."""
    script = tmp_path / "step.py"
    script.write_text(
        "import argparse\nimport warp as wp\n\n"
        "args = argparse.ArgumentParser().parse_args()  # at import time, before any kernel\n\n"
        "@wp.kernel\ndef halve(a: wp.array(dtype=wp.vec2)):\n    a[wp.tid()] = a[wp.tid()] * 0.5\n\n"
        "if __name__ == '__main__':\n"
        "    import sys\n    a = wp.ones(4, dtype=wp.vec2)\n    wp.load_module(device='cpu')\n"
        "    with wp.ScopedCapture(device='cpu', apic=True, force_module_load=False) as cap:\n"
        "        wp.launch(halve, dim=4, inputs=[a])\n"
        "    wp.capture_save(cap.graph, sys.argv[0].replace('.py', '.wrp'))\n")
    made = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr
    p = wrp("trace", tmp_path / "step.wrp", "--kernels", script, "--json")
    assert p.returncode == 0, p.stderr
    matched = [(k["kernel"], k["matched"], k["code"]) for k in json.loads(p.stdout)["kernels"]["kernels"]]
    assert matched == [("halve", True, "same")], matched


def test_names_with_brackets_print_as_they_are(tmp_path):
    """Binding names, paths and messages go to the terminal as text: rich must not read "[red]a" as a style."""
    import wrpkit  # noqa: PLC0415

    a = wp.array(np.ones(8, np.float32), device="cpu")
    b = wp.zeros(8, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(_doubled_k, dim=8, inputs=[a, b], device="cpu")
    folder = tmp_path / "[v2]"
    folder.mkdir()
    path = folder / "m.wrp"
    rec.save(path, inputs={"[red]a": a}, outputs={"b[0]": b})
    shown = wrp("inspect", path, env=dict(os.environ, COLUMNS="100"))
    assert shown.returncode == 0, shown.stderr
    assert "[red]a" in shown.stdout and "b[0]" in shown.stdout and "[v2]" in shown.stdout
    valid = wrp("validate", path)
    assert valid.returncode == 0 and f"valid: {path}" in valid.stdout
    replayed = wrp("replay", path, env=dict(os.environ, COLUMNS="100"))
    assert replayed.returncode == 0 and "b[0]" in replayed.stdout, replayed.stderr
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "wrp-suite.toml").write_text('[defaults]\nrtol = "x"\n')
    bad = wrp("regress", suite)
    assert bad.returncode == EXIT_USAGE and "rtol in [defaults] must be a number" in bad.stderr, bad.stderr
