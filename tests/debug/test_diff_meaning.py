"""``wrp diff`` compares meaning, and backward launches are named and analysed as such.

Captures are made at test time, each program run twice in two processes: kernels that share a key
in modules of their own (Warp's ``module="unique"`` closures, as its sparse factories make them), a
``wp.Mesh`` handle patched at load (``tests/handles_program.py``), and a ``wp.Tape`` step.
"""

from __future__ import annotations

import json
import sys

import pytest
from proc_helpers import TESTS_DIR, run, wrp

HERE = TESTS_DIR


def capture(tmp_path, name, *args, script="meaning_programs.py"):
    out = tmp_path / f"{name}.wrp"
    r = run(sys.executable, HERE / script, *args[:1], out, *args[1:]) if script == "meaning_programs.py" else \
        run(sys.executable, HERE / script, *args, out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.slow  # more than 3 s on two cores: the full suite runs it
def test_kernels_sharing_a_key_are_told_apart_by_module(tmp_path):
    a = capture(tmp_path, "a", "unique")
    b = capture(tmp_path, "b", "unique")
    r = wrp("diff", a, b)
    assert r.returncode == 0 and "identical" in r.stdout, r.stdout
    edited = capture(tmp_path, "edited", "unique", "4.0")
    d = json.loads(wrp("diff", a, edited, "--json").stdout)
    assert not d["identical"]
    assert len(d["code"]) == 1 and d["code"][0]["change"] == "code changed"
    assert d["code"][0]["kernel"].startswith("make_scale__locals__apply [")
    assert [row["kernel"] for row in d["kernels"]] == []  # paired, not "removed" and "added"


@pytest.mark.slow  # every tool on one capture (about 5 s)
def test_every_tool_names_two_kernels_sharing_a_key_apart(tmp_path):
    """inspect, trace, profile, graph and diff call each of two same-key kernels by one name: key and module."""
    a = capture(tmp_path, "a", "unique")
    info = json.loads(wrp("inspect", a, "--json").stdout)
    names = sorted(k["name"] for k in info["kernels"])
    assert len(set(names)) == 2 and all(n.startswith("make_scale__locals__apply [") for n in names), names
    mods = {k["module_name"]: k["name"] for k in info["kernels"]}
    assert all(name[name.index("[") + 1:-1] in mod for mod, name in mods.items())  # the module's own hash
    ops = wrp("inspect", a, "--ops").stdout
    assert all(n in ops for n in names), ops
    trace = json.loads(wrp("trace", a, "--json").stdout)
    assert sorted(op["kernel"] for op in trace["ops"]) == names
    prof = json.loads(wrp("profile", a, "--json", "--repeat", "1").stdout)
    assert sorted(k["name"] for k in prof["kernels"] if k["op"] == "KERNEL_LAUNCH") == names
    dot = tmp_path / "g.dot"
    assert wrp("graph", a, "-o", dot).returncode == 0
    assert all(n in dot.read_text() for n in names)
    edited = capture(tmp_path, "edited", "unique", "4.0")
    d = json.loads(wrp("diff", a, edited, "--json").stdout)
    assert d["code"][0]["kernel"] in names


@pytest.mark.slow  # more than 3 s on two cores: the full suite runs it
@pytest.mark.parametrize("how", ["stock", "wrpkit"])
def test_one_program_holding_a_mesh_captured_twice_is_identical(tmp_path, how):
    a, b = (tmp_path / f"{n}.wrp" for n in "ab")
    for p in (a, b):
        r = run(sys.executable, HERE / "handles_program.py", "handle", how, p)
        assert r.returncode == 0, r.stderr
    r = wrp("diff", a, b)
    assert r.returncode == 0 and "identical" in r.stdout, r.stdout


@pytest.mark.slow  # trace, profile, graph and diff (about 3 s)
def test_backward_launches_are_named_and_write_gradients(tmp_path):
    path = capture(tmp_path, "tape", "tape")
    kernels = HERE / "meaning_programs.py"
    text = wrp("inspect", path, "--ops", "--kernels", kernels).stdout
    assert "loss_k (backward)" in text and "force (backward)" in text
    # The adjoint of the loss kernel reads loss and accumulates f's gradient (not loss):
    line = next(t for t in text.splitlines() if "loss_k (backward)" in t)
    assert "loss=read@" in line and "f.grad=readwrite@" in line
    # ... as its replay shows: trace sees f's gradient change under it, and loss unchanged.
    tr = json.loads(wrp("trace", path, "--json", "--kernels", kernels).stdout)
    back = [o for o in tr["ops"] if o["kernel"] == "loss_k (backward)"]
    assert len(back) == 1
    fwd = [o for o in tr["ops"] if o["kernel"] == "loss_k"]
    assert len(fwd) == 1  # forward and backward are never merged under one name
    written = {w["binding"] for w in back[0]["writes"]}
    assert "f_grad" in written and "loss" not in written, back[0]["writes"]
    # The adjoint of the force kernel accumulates x's gradient and zeroes f's (Warp's adj_array_store:
    # a stored value has no gradient left), so f's gradient is written there too.
    force_back = next(o for o in tr["ops"] if o["kernel"] == "force (backward)")
    assert {"x_grad", "f_grad"} <= {w["binding"] for w in force_back["writes"]}
    out = tmp_path / "out.npz"
    assert wrp("replay", path, "--output", out, "--kernels", kernels).returncode == 0
    import numpy as np  # noqa: PLC0415

    got = np.load(out)
    xs = np.arange(16, dtype=np.float32)
    assert np.array_equal(got["x_grad"].view(np.float32), 2 * xs)  # d(sum x^2)/dx
    assert not got["f_grad"].view(np.float32).any()


CHAIN = '''
import sys
import numpy as np
import warp as wp

wp.config.quiet = True
SIGN = {sign}


@wp.kernel
def stretch(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = 3.0 + SIGN * x[i]


@wp.kernel
def root(y: wp.array(dtype=float), z: wp.array(dtype=float)):
    i = wp.tid()
    z[i] = wp.sqrt(y[i])


if __name__ == "__main__":
    x = wp.array(np.arange(8, dtype=np.float32))
    y = wp.zeros(8, dtype=float)
    z = wp.zeros(8, dtype=float)
    wp.launch(stretch, dim=8, inputs=[x, y])
    wp.launch(root, dim=8, inputs=[y, z])
    wp.capture_begin(device="cpu", apic=True)
    wp.launch(stretch, dim=8, inputs=[x, y])
    wp.launch(root, dim=8, inputs=[y, z])
    g = wp.capture_end()
    wp.capture_save(g, sys.argv[1], inputs={{"x": x}}, outputs={{"z": z}})
'''


@pytest.mark.slow  # four traces of two captures (about 7 s)
def test_a_typed_trace_matches_an_untyped_one_and_an_edit_is_found_where_it_is(tmp_path):
    paths = {}
    for name, sign in (("a", "-1.0"), ("edited", "1.0")):
        d = tmp_path / name
        d.mkdir()
        (d / "chain.py").write_text(CHAIN.format(sign=sign))
        paths[name] = d / "step.wrp"
        r = run(sys.executable, d / "chain.py", paths[name])
        assert r.returncode == 0, r.stderr
    kernels = tmp_path / "a" / "chain.py"
    plain, typed = tmp_path / "plain.trace", tmp_path / "typed.trace"
    assert wrp("trace", paths["a"], "--save", plain).returncode == 0
    assert wrp("trace", paths["a"], "--kernels", kernels, "--save", typed).returncode == 0
    # One run traced with and without types: the untyped trace lists x as maybe written by
    # `stretch` (its file does not say), which it left unchanged: no divergence, either way round.
    for args in (("--against", typed), ("--kernels", kernels, "--against", plain)):
        r = wrp("trace", paths["a"], *args, "--json")
        d = json.loads(r.stdout)
        assert r.returncode == 0 and d["first_divergence"] is None, d["first_divergence"]
    # The edited twin differs at its first op, the one whose kernel changed, typed or not.
    for args in ((), ("--kernels", kernels)):
        r = wrp("trace", paths["edited"], *args, "--against", plain, "--json")
        dv = json.loads(r.stdout)["first_divergence"]
        assert r.returncode == 1 and (dv["seq"], dv["kernel"], dv["reason"]) == (0, "stretch",
                                                                                  "a written region differs"), dv


def test_kernels_a_factory_makes_are_named_with_their_factory(tmp_path):
    """--kernels imports a file without running it: a factory's kernels are said to be made by it."""
    a = capture(tmp_path, "a", "unique")
    r = wrp("annotate", a, "--kernels", HERE / "meaning_programs.py", "-o", tmp_path / "t.wrp")
    assert r.returncode == 2, r.stderr
    assert "it is made when make_scale() runs" in r.stderr and "wrpkit.capture" in r.stderr
    assert r.stderr.count("make_scale__locals__apply: no kernel named") == 1  # two kernels, one reason
    assert not (tmp_path / "t.wrp").exists()
