"""Issue 13, items 1, 2, 3 and 9 (items 4-8: test_cli_consistency.py): paths the user typed, --modules-dir, inputs checked
against the signature, and Program details (pickling, closed, stems, JSON).

Every capture is made here with stock Warp (a vec3 kernel with a view binding).
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import warp as wp
from proc_helpers import invoke_raising as wrp
import wrpkit
from wrpkit.run.replay.engines import native_paths
from wrpkit.errors import WrpBindingError, WrpError, WrpModuleError

N = 256


@wp.kernel
def k_step(pos: wp.array(dtype=wp.vec3f), vel: wp.array(dtype=wp.vec3f), part: wp.array(dtype=wp.float32),
           dt: wp.float32):
    i = wp.tid()
    vel[i] = vel[i] + wp.vec3f(0.0, -9.8, 0.0) * dt
    pos[i] = pos[i] + vel[i] * dt
    if i < 10:
        part[i] = part[i] * 2.0 + pos[i][1]


def _arrays():
    rng = np.random.default_rng(7)
    pos = wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3f, device="cpu")
    vel = wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3f, device="cpu")
    base = wp.array(np.arange(40, dtype=np.float32), device="cpu")
    return pos, vel, base


@pytest.fixture(scope="module")
def cap(tmp_path_factory) -> Path:
    """A wrpkit capture: pos/vel (256,) vec3f, part a view base[5:15] of a 40-float region."""
    d = tmp_path_factory.mktemp("truth")
    pos, vel, base = _arrays()
    part = base[5:15]
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_step, dim=N, inputs=[pos, vel, part, 0.01], device="cpu")
    return Path(rec.save(d / "cloth.wrp", inputs={"pos": pos, "vel": vel, "part": part},
                         outputs={"pos": pos, "vel": vel, "part": part}))


@pytest.fixture(scope="module")
def stock(tmp_path_factory) -> Path:
    """The same step saved with stock ``wp.capture_save``: no signature."""
    d = tmp_path_factory.mktemp("stock")
    pos, vel, base = _arrays()
    wp.capture_begin(device="cpu", apic=True)
    try:
        wp.launch(k_step, dim=N, inputs=[pos, vel, base[5:15], 0.01], device="cpu")
    finally:
        graph = wp.capture_end(device="cpu")
    wp.capture_save(graph, str(d / "stock.wrp"), inputs={"pos": pos, "vel": vel}, outputs={"pos": pos})
    return d / "stock.wrp"


def native(*args):
    return subprocess.run([str(native_paths().require_replayer()), *[str(a) for a in args]], capture_output=True, text=True, timeout=120)


def inputs():
    rng = np.random.default_rng(1)
    return {"pos": rng.standard_normal((N, 3)).astype(np.float32),
            "vel": rng.standard_normal((N, 3)).astype(np.float32),
            "part": rng.standard_normal(10).astype(np.float32)}


# ---------------------------------------------------------------------------
# 1. Paths the user typed are trusted; names from the file stay strict
# ---------------------------------------------------------------------------


def test_symlinks_the_user_typed_are_followed_and_module_refusals_say_why(cap, tmp_path):
    want = wrpkit.load(cap).run(inputs())
    # A link to the .wrp in another folder: modules found beside the target.
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "latest.wrp"
    os.symlink(cap, link)
    got = wrpkit.load(link).run(inputs())
    assert all(np.array_equal(got[n], want[n]) for n in want)
    np.savez(tmp_path / "in.npz", **inputs())
    r = wrp("replay", link, "--inputs", tmp_path / "in.npz", "--engine", "native", "--output", tmp_path / "o.npz")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz") as z:
        assert np.array_equal(z["pos"], want["pos"])
    assert native(link, "--list").returncode == 0
    assert native(link).returncode == 0
    # A link to a .wrpk bundle.
    assert wrp("convert", cap, tmp_path / "cloth.wrpk").exit_code == 0
    os.symlink(tmp_path / "cloth.wrpk", tmp_path / "latest.wrpk")
    assert wrp("replay", tmp_path / "latest.wrpk").exit_code == 0
    assert native(tmp_path / "latest.wrpk").returncode == 0
    # A symlinked modules folder works in every engine.
    d = tmp_path / "dirlink"
    d.mkdir()
    shutil.copy2(cap, d / "g.wrp")
    shutil.copytree(cap.with_name("cloth_modules"), tmp_path / "real_modules")
    os.symlink(tmp_path / "real_modules", d / "g_modules")
    assert wrpkit.load(d / "g.wrp").run(inputs())["pos"].tobytes() == want["pos"].tobytes()
    assert native(d / "g.wrp").returncode == 0, native(d / "g.wrp").stderr
    # Hard-linked module files are accepted (read once, checked, those bytes loaded).
    h = tmp_path / "hard"
    h.mkdir()
    shutil.copy2(cap, h / "g.wrp")
    (h / "g_modules").mkdir()
    for f in cap.with_name("cloth_modules").iterdir():
        os.link(tmp_path / "real_modules" / f.name, h / "g_modules" / f.name)
    assert os.stat(next((h / "g_modules").iterdir())).st_nlink == 2
    assert wrpkit.load(h / "g.wrp").run(inputs())["pos"].tobytes() == want["pos"].tobytes()
    assert native(h / "g.wrp").returncode == 0
    assert wrp("validate", h / "g.wrp").exit_code == 0
    # Module file names come from the file: a symlinked module file is refused, with its reason and a fix.
    mod = next(f.name for f in (h / "g_modules").iterdir() if f.name.endswith(".o"))
    (h / "g_modules" / mod).unlink()
    os.symlink(tmp_path / "real_modules" / mod, h / "g_modules" / mod)
    with pytest.raises(WrpModuleError, match="symbolic link") as e:
        wrpkit.load(h / "g.wrp")
    assert "cp --remove-destination" in e.value.hint
    res = native(h / "g.wrp")
    assert res.returncode == 3 and "symbolic link" in res.stderr and "cp --remove-destination" in res.stderr
    # Empty, and a digest mismatch: each says its reason and a fix.
    (h / "g_modules" / mod).unlink()
    (h / "g_modules" / mod).write_bytes(b"")
    with pytest.raises(WrpModuleError, match="empty") as e:
        wrpkit.load(h / "g.wrp")
    assert "Copy the module file again" in e.value.hint
    assert "empty" in native(h / "g.wrp").stderr
    data = bytearray((tmp_path / "real_modules" / mod).read_bytes())
    data[-1] ^= 1
    (h / "g_modules" / mod).write_bytes(bytes(data))
    with pytest.raises(WrpModuleError, match="SHA-256") as e:
        wrpkit.load(h / "g.wrp")
    assert "copy the original" in e.value.hint
    res = native(h / "g.wrp")
    assert res.returncode == 3 and "SHA-256" in res.stderr and "Copy the original" in res.stderr


# ---------------------------------------------------------------------------
# 2. --modules-dir, renamed files, --list without modules
# ---------------------------------------------------------------------------


def test_modules_dir_and_a_renamed_wrp(cap, tmp_path):
    shutil.copy2(cap, tmp_path / "renamed.wrp")
    shutil.copytree(cap.with_name("cloth_modules"), tmp_path / "cloth_modules")
    # The hint names the folder beside it.
    with pytest.raises(WrpModuleError) as e:
        wrpkit.load(tmp_path / "renamed.wrp")
    assert str(tmp_path / "cloth_modules") in e.value.hint and "--modules-dir" in e.value.hint
    res = native(tmp_path / "renamed.wrp")
    assert res.returncode == 3 and f"--modules-dir {tmp_path / 'cloth_modules'}" in res.stderr, res.stderr
    r = wrp("replay", tmp_path / "renamed.wrp")
    assert r.exit_code == 3 and "cloth_modules" in r.output
    # --modules-dir on every command.
    md = tmp_path / "cloth_modules"
    for engine in ("python", "native"):
        r = wrp("replay", tmp_path / "renamed.wrp", "--modules-dir", md, "--engine", engine)
        assert r.exit_code == 0, r.output
    assert wrp("validate", tmp_path / "renamed.wrp", "--modules-dir", md).exit_code == 0
    assert wrp("check", tmp_path / "renamed.wrp", "--modules-dir", md).exit_code == 0
    r = wrp("convert", tmp_path / "renamed.wrp", tmp_path / "out.wrpk", "--modules-dir", md)
    assert r.exit_code == 0, r.output
    assert native(tmp_path / "renamed.wrp", "--modules-dir", md).returncode == 0
    assert wrpkit.load(tmp_path / "renamed.wrp", modules_dir=md).run()["pos"].shape == (N, 3)
    assert wrp("validate", tmp_path / "renamed.wrp").exit_code == 3
    # --list works without modules, as inspect does; a present folder is still checked.
    res = native(tmp_path / "renamed.wrp", "--list", "--json")
    assert res.returncode == 0, res.stderr
    assert {b["name"] for b in json.loads(res.stdout)["bindings"]} == {"pos", "vel", "part"}
    assert wrp("inspect", tmp_path / "renamed.wrp").exit_code == 0


# ---------------------------------------------------------------------------
# 3. Inputs checked against the signature in every route
# ---------------------------------------------------------------------------


@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_inputs_are_checked_against_the_signature_everywhere(cap, stock, tmp_path):
    good = inputs()
    prog = wrpkit.load(cap)
    bad = {"transposed": good["pos"].T.copy(), "flattened": good["pos"].reshape(-1).copy(),
           "raw bytes": good["pos"].tobytes()}
    for what, value in bad.items():
        with pytest.raises(WrpBindingError) as e:
            prog.run({"pos": value})
        assert e.value.exit_code == 2, what
        if what != "raw bytes":
            np.save(tmp_path / "bad.npy", value)
            for engine in ("python", "native"):
                r = wrp("replay", cap, "--input", f"pos={tmp_path / 'bad.npy'}", "--engine", engine)
                assert r.exit_code == 2 and "shape" in r.output, (what, engine, r.output)
            res = native(cap, "--input", f"pos={tmp_path / 'bad.npy'}")
            assert res.returncode == 2 and "shape" in res.stderr, (what, res.stderr)
    # A view binding takes the view's shape in every engine, and the same result.
    out = prog.run(good)
    np.save(tmp_path / "part.npy", good["part"])
    np.savez(tmp_path / "in.npz", **good)
    results = {}
    for engine in ("python", "native"):
        r = wrp("replay", cap, "--inputs", tmp_path / "in.npz", "--engine", engine, "--output",
                tmp_path / f"{engine}.npz")
        assert r.exit_code == 0, r.output
        with np.load(tmp_path / f"{engine}.npz") as z:
            results[engine] = {k: z[k] for k in z.files}
    for n in out:
        assert results["python"][n].tobytes() == out[n].tobytes() == results["native"][n].tobytes(), n
    res = native(cap, "--input", f"part={tmp_path / 'part.npy'}", "--output", f"part={tmp_path / 'p.npy'}")
    assert res.returncode == 0, res.stderr
    whole = np.zeros(40, np.float32)  # the whole region is not the binding's shape
    with pytest.raises(WrpBindingError, match="shape"):
        prog.run({"part": whole})
    # reset() restores the captured state: the first run after load and after reset agree.
    first = wrpkit.load(cap).run()
    prog.run(good, repeat=3)
    prog.reset()
    again = prog.run()
    assert all(first[n].tobytes() == again[n].tobytes() for n in first)
    # An unset binding gets a notice naming the captured value; --check says what it compared.
    np.savez(tmp_path / "golden.npz", pos=out["pos"])
    r = wrp("replay", cap, "--inputs", tmp_path / "in.npz", "--check", tmp_path / "golden.npz", "--repeat", "3",
            "--json")
    rep = json.loads(r.stdout)
    assert rep["check"]["not_compared"] == ["vel", "part"]
    assert "last of 3 replays" in rep["check"]["compared"]
    r = wrp("replay", cap, "--input", f"part={tmp_path / 'part.npy'}")
    assert "notice: binding 'pos' was not given as an input" in r.output and "captured value" in r.output
    assert "notice: binding 'part'" not in r.output  # given
    np.savez(tmp_path / "golden2.npz", pos=out["pos"].T.copy())
    r = wrp("replay", cap, "--inputs", tmp_path / "in.npz", "--check", tmp_path / "golden2.npz")
    assert r.exit_code == 1 and "shape differs" in r.output and "not compared" in r.output
    # --dtype types a stock file's bindings.
    np.save(tmp_path / "pos.npy", good["pos"])
    r = wrp("replay", stock, "--dtype", "pos=vec3f", "--input", f"pos={tmp_path / 'pos.npy'}", "--output",
            tmp_path / "s.npz")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "s.npz") as z:
        assert z["pos"].shape == (N, 3) and z["pos"].dtype == np.float32
    np.save(tmp_path / "posT.npy", good["pos"].T.copy())
    r = wrp("replay", stock, "--dtype", "pos=vec3f", "--input", f"pos={tmp_path / 'posT.npy'}")
    assert r.exit_code == 2 and "shape" in r.output
    assert wrp("replay", stock, "--dtype", "pos=vec7q").exit_code == 2


# ---------------------------------------------------------------------------
# 9. Python API details
# ---------------------------------------------------------------------------


def _sweep(prog, x):
    return prog.run({"pos": x})["pos"]


@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_programs_travel_to_workers_and_other_api_details(cap, tmp_path):
    prog = wrpkit.load(cap)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((N, 3)).astype(np.float32) for _ in range(32)]
    serial = []
    for x in xs:
        prog.reset()
        serial.append(prog.run({"pos": x})["pos"])
    fresh = wrpkit.load(prog.bundle_bytes())
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        # Each task unpickles its own Program from the bundle bytes: fresh captured state each time.
        parallel = list(pool.map(_sweep, [prog] * len(xs), xs))
    assert len(parallel) == 32
    assert all(a.tobytes() == b.tobytes() for a, b in zip(parallel, serial))
    assert fresh.run({"pos": xs[0]})["pos"].tobytes() == serial[0].tobytes()
    # A closed Program says so.
    p2 = wrpkit.load(cap)
    p2.close()
    assert p2.closed
    for call in (lambda: p2.run(), lambda: p2.get("pos"), lambda: p2.launch(), lambda: p2.reset()):
        with pytest.raises(WrpError, match="closed"):
            call()
    # A stem finds stem.wrp, as wp.capture_load does.
    assert wrpkit.load(cap.with_suffix("")).run()["pos"].shape == (N, 3)
    # inspect and validate read the .json form; the signature there is readable and editable.
    assert wrp("convert", cap, tmp_path / "c.json").exit_code == 0
    r = wrp("inspect", tmp_path / "c.json", "--json")
    assert r.exit_code == 0, r.output
    assert {b["name"] for b in json.loads(r.stdout)["bindings"]} >= {"pos", "vel", "part"}
    assert wrp("validate", tmp_path / "c.json").exit_code == 0
    doc = json.loads((tmp_path / "c.json").read_text())
    sig = {s["name"]: s for s in doc["annotations"]["signature"]}
    assert sig["pos"]["dtype"]["name"] == "vec3f" and sig["pos"]["shape"] == [N]
    assert sig["part"]["byte_offset"] == 20
    assert wrp("convert", tmp_path / "c.json", tmp_path / "back.wrp").exit_code == 0
    assert (tmp_path / "back.wrp").read_bytes() == cap.read_bytes()
    sig["vel"]["is_input"] = False
    (tmp_path / "edited.json").write_text(json.dumps(doc))
    assert wrp("convert", tmp_path / "edited.json", tmp_path / "edited.wrp").exit_code == 0
    assert wrpkit.load(tmp_path / "edited.wrp").inputs == ["pos", "part"]
