"""wrp profile and wrpkit.profile on real captures made at test time.

Times themselves are never asserted (they belong to bench/bench_profile.py);
what is asserted is what a profile must get right whatever the machine: which
ops ran, in which order and how they are numbered (against `wrp trace` of the
same file), the aggregates' arithmetic, the outputs' shapes, the Chrome
trace-event structure, and that the op with a thousand times the work of
another gets more of the time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import child_pids, interruptible

import profile_programs as pp  # noqa: E402
from trace_event_rules import check_trace_event_file  # noqa: E402
import warp as wp  # noqa: E402
from proc_helpers import TESTS_DIR, invoke as wrp  # noqa: E402
import wrpkit  # noqa: E402
from wrpkit.errors import EXIT_CRASH, EXIT_TIMEOUT, WrpCrashError, WrpTimeoutError  # noqa: E402

from proc_helpers import native_or_skip  # noqa: E402

ENGINES = ["python", "native"]




@wp.kernel
def k_scatter(idx: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[idx[i]] = float(i)


@pytest.fixture(scope="module")
def caps(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("profile")
    idx = wp.array(np.arange(pp.N, dtype=np.int32), device="cpu")
    out = wp.zeros(pp.N, dtype=wp.float32, device="cpu")
    a = pp.unequal_arrays()
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(pp.k_light, dim=pp.N, inputs=[a["x"], a["y"]], device="cpu")
        wp.launch(k_scatter, dim=pp.N, inputs=[idx, out], device="cpu")
    scatter = rec.save(d / "scatter.wrp", inputs={"idx": idx, "x": a["x"]}, outputs={"out": out})
    return {"unequal": pp.capture_unequal(d / "unequal.wrp"), "while_if": pp.capture_while_if(d / "while_if.wrp"),
            "scatter": scatter}


def _key(o):
    return o["seq"], o["index"], o["path"], o["iteration"], tuple(o["iterations"]), o["op"], o["kernel"]


@pytest.mark.parametrize("engine", ENGINES)
def test_profile_numbers_ops_as_trace_does_inside_while_and_if(caps, engine):
    native_or_skip(engine)
    # the thread's CPU time: which op gets the time must not depend on who else wants the core
    p = wrpkit.profile(caps["while_if"], engine=engine, repeat=2, warmup=0, clock="cpu")
    t = wrpkit.trace(caps["while_if"], engine=engine)
    assert [_key(o) for o in p.ops] == [_key(o) for o in t.ops]
    # counter 4: count-down then IF (then: k_heavy on odd counters 3 and 1, else k_light), four iterations
    assert [(o["path"], o["iteration"], o["kernel"]) for o in p.ops] == [
        ("0", None, "k_light"),
        ("1.0", 0, "k_count_down"), ("1.1.0", 0, "k_heavy"),
        ("1.0", 1, "k_count_down"), ("1.1.e0", 1, "k_light"),
        ("1.0", 2, "k_count_down"), ("1.1.0", 2, "k_heavy"),
        ("1.0", 3, "k_count_down"), ("1.1.e0", 3, "k_light"),
        ("2", None, "k_light")]
    calls = {k["name"]: k["calls"] for k in p.kernels}
    assert calls == {"k_heavy": 2, "k_count_down": 4, "k_light": 4}
    assert [(r["index"], r["op"], r["calls"]) for r in p.top_level] == [(0, "KERNEL_LAUNCH", 1), (1, "WHILE", 8),
                                                                        (2, "KERNEL_LAUNCH", 1)]
    # the aggregates are sums of the per-op medians
    assert p.total_ms == pytest.approx(sum(o["ms"] for o in p.ops))
    assert sum(k["total_ms"] for k in p.kernels) == pytest.approx(p.total_ms)
    assert sum(r["total_ms"] for r in p.top_level) == pytest.approx(p.total_ms)
    assert sum(k["share"] for k in p.kernels) == pytest.approx(1.0, abs=1e-5)  # each share rounded to 1e-6
    for o in p.ops:  # kernel launches less the launch floor (on the CPU), other ops less the empty step
        base = p.launch_floor_ms if o["op"] == "KERNEL_LAUNCH" else p.floor_ms
        assert o["ms"] == pytest.approx(max(0.0, o["raw_ms"] - base), abs=2e-6)  # whole ns
    assert p.launch_floor_ms >= p.floor_ms > 0
    assert p.floor_ms > 0 and p.replay_ms > 0 and p.coverage == pytest.approx(p.total_ms / p.replay_ms)
    # k_heavy runs 4000 multiply-adds per thread, k_light one add: the profile must see it
    assert p.kernels[0]["name"] == "k_heavy" and p.top(1)[0]["name"] == "k_heavy"
    assert p.top(1, by="top_level")[0]["index"] == 1  # the WHILE holds both k_heavy runs


def _capture_runs(path: Path) -> Path:
    """Runs of consecutive ops at the top, in a WHILE body and in an IF inside it, and one lone op:
    k_light, a memset, k_light; WHILE counter (4): k_count_down, k_light, IF flag: (k_heavy, k_light);
    k_light."""
    a, counter, flag, launch = pp.loop_state()

    def then():
        launch(pp.k_heavy, a["y"], a["z"], pp.HEAVY)
        launch(pp.k_light, a["z"], a["y"])

    def body():
        wp.launch(pp.k_count_down, dim=1, inputs=[counter, flag], device="cpu")
        launch(pp.k_light, a["z"], a["y"])
        wp.capture_if(flag, on_true=then)

    with wrpkit.capture(device="cpu") as rec:
        launch(pp.k_light, a["x"], a["y"])
        a["z"].zero_()
        launch(pp.k_light, a["y"], a["z"])
        wp.capture_while(counter, body)
        launch(pp.k_light, a["y"], a["d"])
    return rec.save(path, inputs={"x": a["x"], "counter": counter}, outputs={"y": a["y"], "z": a["z"], "d": a["d"]})


@pytest.mark.parametrize("engine", ENGINES)
def test_runs_of_consecutive_ops_are_timed_together_and_split_by_each_ops_own_time(tmp_path, engine):
    native_or_skip(engine)
    path = _capture_runs(tmp_path / "runs.wrp")
    p = wrpkit.profile(path, engine=engine, repeat=2, warmup=0, clock="cpu")
    t = wrpkit.trace(path, engine=engine)
    assert [_key(o) for o in p.ops] == [_key(o) for o in t.ops]  # the grouped walk changes no numbering
    # counter 4 -> 3, 2, 1, 0: the IF runs its body on odd counters (iterations 0 and 2)
    assert [(o["path"], o["iteration"], o["op"]) for o in p.ops][:5] == [
        ("0", None, "KERNEL_LAUNCH"), ("1", None, "MEMSET"), ("2", None, "KERNEL_LAUNCH"),
        ("3.0", 0, "KERNEL_LAUNCH"), ("3.1", 0, "KERNEL_LAUNCH")]
    groups: dict = {}
    for o in p.ops:
        groups.setdefault((o["path"].rsplit(".", 1)[0] if "." in o["path"] else "", tuple(o["iterations"])),
                          []).append(o)
    top = groups.pop(("", ()))
    assert [o["path"] for o in top] == ["0", "1", "2", "4"]
    lone = top.pop()  # the last k_light follows the WHILE: a run of one, timed alone
    assert lone["ms"] == pytest.approx(max(0.0, lone["raw_ms"] - p.launch_floor_ms), abs=2e-6)
    groups[("", ())] = top
    assert sorted((k, len(v)) for k, v in groups.items()) == [
        (("", ()), 3), (("3", (0,)), 2), (("3", (1,)), 2), (("3", (2,)), 2), (("3", (3,)), 2),
        (("3.2", (0,)), 2), (("3.2", (2,)), 2)]
    assert p.grouped_ops == 15 == len(p.ops) - 1 and p.to_json()["grouped_ops"] == 15
    assert p.group_floor_ms >= p.floor_ms > 0
    for ops in groups.values():  # each run's time is split by its ops' own times above the empty step
        weights = [max(0.0, o["raw_ms"] - p.floor_ms) for o in ops]
        total = sum(o["ms"] for o in ops)
        # The figures are whole ns (0.5e-6 ms of rounding each): a weight recomputed from them is off by
        # up to 1e-6 ms, which a share of a large total over small weights magnifies.
        slack = 5e-6 + (total * 1e-6 * (1 + len(ops)) / sum(weights) if sum(weights) else 0.0)
        for o, w in zip(ops, weights):
            assert o["ms"] == pytest.approx(total * w / sum(weights) if sum(weights) else total / len(ops),
                                            abs=slack)
    heavy, light = groups[("3.2", (0,))]
    assert heavy["kernel"] == "k_heavy" and heavy["ms"] > 10 * light["ms"]  # 4000 steps per thread against 1
    assert p.total_ms == pytest.approx(sum(o["ms"] for o in p.ops))
    # the table says so
    r = wrp("profile", path, "--engine", engine, "--repeat", "1", "--clock", "cpu")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("grouped: 15 of 16 op runs"))
    assert lines[at + 1].startswith("at once, less ") and max(len(x) for x in lines[at:at + 2]) <= 80


@pytest.mark.parametrize("engine", ENGINES)
def test_profile_of_unequal_kernels_ranks_them_by_their_work(caps, engine):
    native_or_skip(engine)
    p = wrpkit.profile(caps["unequal"], engine=engine, repeat=3, clock="cpu")  # see above
    by = {k["name"]: k for k in p.kernels}
    assert set(by) == {"k_light", "k_heavy", "k_vec"} and by["k_light"]["calls"] == 2
    # k_heavy: 4000 steps per thread, k_vec 800, k_light 1
    assert by["k_heavy"]["total_ms"] > by["k_vec"]["total_ms"] > by["k_light"]["total_ms"]
    assert by["k_light"]["median_ms"] == pytest.approx(float(np.median(
        [o["ms"] for o in p.ops if o["kernel"] == "k_light"])), abs=1e-6)  # whole ns
    # the profile changed nothing: a replay afterwards still gives the live results
    a = pp.unequal_arrays()
    for k, args in pp.unequal_launches(a):
        wp.launch(k, dim=pp.N, inputs=args, device="cpu")
    got = wrpkit.load(caps["unequal"]).run()
    np.testing.assert_array_equal(got["y"], a["y"].numpy())


@pytest.mark.slow
def test_repeat_and_warmup_set_the_rounds_and_in_process_gives_the_same_ops(caps):
    p = wrpkit.profile(caps["while_if"], repeat=3, warmup=2, isolate=False)
    assert (p.repeat, p.warmup, len(p.step_ms), len(p.replay_rounds_ms)) == (3, 2, 3, 3)
    assert p.replay_ms == pytest.approx(float(np.median(p.replay_rounds_ms)))
    # every round starts from the same memory: the WHILE runs its four iterations in every round
    assert len(p.ops) == 10
    assert p.timer == "host"
    c = wrpkit.profile(caps["while_if"], repeat=1, clock="cpu", isolate=False)  # the thread's CPU time
    assert c.timer == "host-cpu" and [_key(o) for o in c.ops] == [_key(o) for o in p.ops]
    assert wrp("profile", caps["while_if"], "--clock", "cpu", "--repeat", "1").exit_code == 0
    with pytest.raises(wrpkit.WrpBindingError):
        wrpkit.profile(caps["while_if"], repeat=0)
    with pytest.raises(wrpkit.WrpBindingError):
        wrpkit.profile(caps["while_if"], clock="sundial")
    r = wrp("profile", caps["while_if"], "--repeat", "0")
    assert r.exit_code == 2, r.output


@pytest.mark.slow
def test_inputs_change_what_runs(caps, tmp_path):
    np.save(tmp_path / "counter.npy", np.array([2], np.int32))
    r = wrp("profile", caps["while_if"], "--input", f"counter={tmp_path / 'counter.npy'}", "--json",
            "--repeat", "1")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert [o["path"] for o in d["ops"]] == ["0", "1.0", "1.1.0", "1.0", "1.1.e0", "2"]  # two iterations
    np.savez(tmp_path / "in.npz", counter=np.array([1], np.int32))
    p = wrpkit.profile(caps["while_if"], inputs={"counter": np.array([1], np.int32)}, repeat=1)
    assert len(p.ops) == 4
    assert wrp("profile", caps["while_if"], "--inputs", tmp_path / "in.npz", "--repeat", "1").exit_code == 0
    assert wrp("profile", caps["while_if"], "--input", "nope=x.npy").exit_code == 2


@pytest.mark.slow
def test_cli_table_fits_80_columns_and_json_has_the_documented_keys(caps):
    path = caps["while_if"]
    r = subprocess.run([sys.executable, "-m", "wrpkit.cli", "profile", path.name, "--repeat", "2"], cwd=path.parent,
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"}, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80, r.stdout
    assert any(x.startswith("k_heavy") for x in lines) and "coverage" in r.stdout and "by kernel" in r.stdout
    assert "WHILE" in r.stdout and "ms per launch" in r.stdout and "ms per other op" in r.stdout
    # the table and the -o file of one run agree, kernel by kernel
    out = path.parent / "table_run.json"
    r = subprocess.run([sys.executable, "-m", "wrpkit.cli", "profile", path.name, "--repeat", "2", "-o", out.name],
                       cwd=path.parent, capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"},
                       timeout=300)
    assert r.returncode == 0, r.stderr
    from wrpkit.cli.profile import fmt_ms  # noqa: PLC0415

    sums: dict = {}
    for e in json.loads(out.read_text())["traceEvents"]:
        if e["ph"] == "X" and "seq" in e["args"]:
            k = e["args"]["kernel"] or e["args"]["op"]
            sums[k] = sums.get(k, 0.0) + e["args"]["ms"]
    rows = {cells[0]: cells for cells in (
        [c.strip() for c in x.split("│")] for x in r.stdout.splitlines() if x.count("│") == 4) if cells[0] in sums}
    assert set(rows) == set(sums)
    for k, ms in sums.items():
        assert rows[k][2] == fmt_ms(ms), (k, rows[k], ms)
    # a .wrpk bundle of the same capture profiles the same ops
    assert wrp("convert", caps["unequal"], path.parent / "unequal.wrpk").exit_code == 0
    b = wrpkit.profile(path.parent / "unequal.wrpk", repeat=1)
    assert [_key(o) for o in b.ops] == [_key(o) for o in wrpkit.profile(caps["unequal"], repeat=1).ops]
    r = wrp("profile", caps["unequal"], "--json", "--repeat", "1")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {"kernels", "ops", "total_ms", "replay_ms", "top_level", "floor_ms", "coverage"} <= set(d)
    assert {"name", "calls", "total_ms", "median_ms", "share"} <= set(d["kernels"][0])
    assert d["kernels"][0]["total_ms"] == max(k["total_ms"] for k in d["kernels"])  # sorted by total


def test_chrome_trace_has_one_event_per_op_run_inside_while_and_if_events(caps, tmp_path):
    out = tmp_path / "deep" / "er" / "p.json"  # missing folders are made
    # The wall clock: this checks the events' nesting, which zero-length ops (a coarse CPU-time clock,
    # which --clock auto takes on a busy machine) would blur at the IF events' edges.
    r = wrp("profile", caps["while_if"], "-o", out, "--json", "--repeat", "2", "--clock", "wall")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    trace = check_trace_event_file(out)["data"]  # the format's rules, nesting on one thread included
    assert trace["displayTimeUnit"] == "ms" and trace["otherData"]["wrpkit"]["total_ms"] == d["total_ms"]
    evs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    ops = [e for e in evs if "seq" in e["args"]]
    assert [e["args"]["seq"] for e in ops] == list(range(len(d["ops"])))
    for e, o in zip(ops, d["ops"]):
        assert e["dur"] == pytest.approx(o["ms"] * 1e3, abs=1e-3) and e["args"]["path"] == o["path"]
        assert e["args"]["iteration"] == o["iteration"]
    whiles = [e for e in evs if e["cat"] == "WHILE"]
    iters = [e for e in evs if e["cat"] == "WHILE iteration"]
    ifs = [e for e in evs if e["cat"] == "IF"]
    assert len(whiles) == 1 and [e["args"]["iteration"] for e in iters] == [0, 1, 2, 3]
    assert [e["args"]["branch"] for e in ifs] == ["then", "else", "then", "else"]

    def inside(inner, outer):
        return outer["ts"] - 1e-3 <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3

    for e in ops:
        if e["args"]["path"].startswith("1."):
            it = iters[e["args"]["iteration"]]
            assert inside(e, whiles[0]) and inside(e, it)
        if e["args"]["path"].startswith("1.1."):
            assert inside(e, ifs[e["args"]["iteration"]])
        else:
            assert not any(inside(e, i) and i["dur"] > 0 for i in ifs)
    assert whiles[0]["dur"] == pytest.approx(sum(e["dur"] for e in ops if e["args"]["path"].startswith("1.")),
                                             abs=0.01)
    # parents come before their children at the same timestamp (the order viewers nest them in)
    first_in_loop = next(i for i, e in enumerate(evs) if e is whiles[0])
    assert evs[first_in_loop + 1] is iters[0]


@pytest.mark.slow
def test_chromium_devtools_performance_panel_draws_every_event_of_the_o_file(caps, tmp_path):
    """The -o file opened in Chromium's own DevTools Performance panel ("Load profile"), offline."""
    from test_graph import _browser  # noqa: PLC0415  (skips without playwright or Chromium)
    from devtools_trace import DevToolsLoadError, load_in_devtools  # noqa: PLC0415

    _browser()
    out = tmp_path / "p.json"
    r = wrp("profile", caps["while_if"], "-o", out, "--repeat", "2")
    assert r.exit_code == 0, r.output
    trace = json.loads(out.read_text())
    shot = tmp_path / "devtools.png"
    got = load_in_devtools(out, screenshot=shot)
    assert got["raw_events"] == len(trace["traceEvents"])  # the panel's trace engine parsed every event
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # ...and its flame chart draws every complete event (ops, IF, WHILE and its iterations), where the file
    # puts it, at the depth its nesting gives: none dropped as improperly nested
    assert sorted(e[0] for e in got["entries"]) == sorted(e["name"] for e in xs)
    drawn = sorted((e[0], e[1], e[2]) for e in got["entries"])
    want = sorted((e["name"], e["ts"] / 1e3, e["dur"] / 1e3) for e in xs)
    for (n, t, d), (wn, wt, wd) in zip(drawn, want):
        assert n == wn and t == pytest.approx(wt, abs=1e-9) and d == pytest.approx(wd, abs=1e-9)
    depth = {e[0]: e[3] for e in got["entries"]}
    assert depth["WHILE 1"] == 0 and depth["iteration 0"] == 1 and depth["k_count_down"] == 2
    assert depth["IF 1.1 (then)"] == 2 and depth["k_heavy"] == 3
    assert any(g.startswith(f"wrp profile {caps['while_if'].name}") for g in got["groups"])
    assert shot.stat().st_size > 10_000
    # ops timed at zero (a clock coarser than the op, as --clock auto's CPU time on a busy machine gives):
    # drawn where the file puts them and nested as before, not widened into the event that follows
    import wrpkit  # noqa: PLC0415
    prof = wrpkit.profile(str(caps["while_if"]), repeat=1, warmup=0)
    for o in prof.ops:
        if o["kernel"] == "k_count_down":
            o["ms"] = 0.0
    zeros = prof.save_chrome_trace(tmp_path / "zeros.json")
    zxs = [e for e in json.loads(zeros.read_text())["traceEvents"] if e["ph"] == "X"]
    assert any(e["name"] == "k_count_down" for e in zxs)
    got = load_in_devtools(zeros)
    drawn = sorted((e[0], e[1], e[2]) for e in got["entries"])
    want = sorted((e["name"], e["ts"] / 1e3, e["dur"] / 1e3) for e in zxs)
    assert len(drawn) == len(want)
    for (n, t, d), (wn, wt, wd) in zip(drawn, want):
        assert n == wn and t == pytest.approx(wt, abs=1e-9) and d == pytest.approx(wd, abs=1e-9)
    zdepth = {e[0]: e[3] for e in got["entries"]}
    assert zdepth["k_count_down"] == 2 and zdepth["IF 1.1 (then)"] == 2 and zdepth["k_heavy"] == 3
    # the check can fail: a file cut short is reported by the panel as broken
    cut = tmp_path / "cut.json"
    cut.write_bytes(out.read_bytes()[: out.stat().st_size // 2])
    with pytest.raises(DevToolsLoadError, match="JSON"):
        load_in_devtools(cut, timeout=20)


def test_python_api_never_prints_and_its_outputs_round_trip(caps, tmp_path, capfd):
    p = wrpkit.profile(caps["unequal"], repeat=1)
    cap = capfd.readouterr()
    assert cap.out == "" and cap.err == ""
    assert [k["name"] for k in p.top(2)] == [k["name"] for k in p.kernels[:2]]
    assert len(p.top(100, by="op")) == 4
    with pytest.raises(wrpkit.WrpError):
        p.top(1, by="nonsense")
    d = p.to_json()
    assert json.loads(json.dumps(d))["kernels"] == p.kernels
    p.save_chrome_trace(tmp_path / "t.json")
    from wrpkit.debug.profile_format import load_profile  # noqa: PLC0415

    back = load_profile(tmp_path / "t.json")
    (tmp_path / "p.json").write_text(json.dumps(d))
    again = load_profile(tmp_path / "p.json")
    assert back["paths"].keys() == again["paths"].keys() == {"0", "1", "2", "3"}
    for k in back["paths"]:
        assert back["paths"][k]["ms"] == pytest.approx(again["paths"][k]["ms"], abs=1e-6)


@pytest.mark.slow
def test_a_crash_inside_a_profiled_op_names_it_and_writes_nothing(caps, tmp_path):
    far = np.full(pp.N, 2**31 - 1, np.int32)  # out + 8 GiB: no memory of this process
    np.save(tmp_path / "idx.npy", far)
    out = tmp_path / "out"
    out.mkdir()
    r = wrp("profile", caps["scatter"], "--input", f"idx={tmp_path / 'idx.npy'}", "-o", out / "p.json", "--json")
    assert r.exit_code == EXIT_CRASH, r.output
    err = json.loads(r.stdout)
    assert err["exit_code"] == EXIT_CRASH and "k_scatter" in err["error"], err
    assert "in op 1 (KERNEL_LAUNCH of kernel 'k_scatter'" in err["error"]
    assert os.listdir(out) == []
    with pytest.raises(WrpCrashError) as e:
        wrpkit.profile(caps["scatter"], inputs={"idx": far}, engine="native" if _has_native() else "python")
    assert (e.value.op_index, e.value.path, e.value.kernel) == (1, "1", "k_scatter")


def _has_native() -> bool:
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    try:
        native_paths().require_library()
        return True
    except wrpkit.WrpError:
        return False


@pytest.mark.slow
def test_timeout_kills_a_never_ending_while_and_writes_nothing(caps, tmp_path):
    np.save(tmp_path / "counter.npy", np.array([-1], np.int32))  # stepped: minutes before Warp's 2^24-iteration guard
    out = tmp_path / "out"
    out.mkdir()
    r = wrp("profile", caps["while_if"], "--input", f"counter={tmp_path / 'counter.npy'}", "--timeout", "2",
            "-o", out / "p.json", "--json")
    assert r.exit_code == EXIT_TIMEOUT, r.output
    assert json.loads(r.stdout)["exit_code"] == EXIT_TIMEOUT
    assert os.listdir(out) == []
    with pytest.raises(WrpTimeoutError):
        wrpkit.profile(caps["while_if"], inputs={"counter": np.array([-1], np.int32)}, timeout=1.5)


def test_unwritable_output_exits_1_before_profiling_and_writes_nothing(caps, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    t0 = time.monotonic()
    r = wrp("profile", caps["while_if"], "-o", blocker / "sub" / "p.json", "--json")
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["exit_code"] == 1 and "cannot write" in r.stdout
    assert blocker.read_text() == "not a folder"
    if os.geteuid() != 0:  # root writes into read-only folders
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            r = wrp("profile", caps["while_if"], "-o", ro / "p.json")
            assert r.exit_code == 1 and os.listdir(ro) == [], r.output
        finally:
            ro.chmod(0o700)
    assert time.monotonic() - t0 < 30  # refused before the child started (a profile takes seconds)
    assert sorted(os.listdir(tmp_path)) == ["a_file"]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the child process")
def test_ctrl_c_exits_130_and_kills_the_child(caps, tmp_path):
    np.save(tmp_path / "counter.npy", np.array([-1], np.int32))
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "wrpkit.cli", "profile", str(caps["while_if"]), "--input",
                             f"counter={tmp_path / 'counter.npy'}", "-o", str(out / "p.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    try:
        kids = []
        for _ in range(600):
            kids = child_pids(proc.pid, b"wrpkit.run.contain.child") if proc.poll() is None else []
            if kids:
                break
            time.sleep(0.1)
        assert kids, "the profile child never started"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    for k in kids:
        assert not Path(f"/proc/{k}").exists(), "the child outlived the interrupted profile"
    assert os.listdir(out) == []


_NVTX_RECORDER = r"""
#include <stdio.h>
#include <stdlib.h>
/* An NVTX library that records what it is given: one line per push ("+name") and pop ("-"). */
static FILE *out(void) {
    static FILE *f;
    if (!f) f = fopen(getenv("NVTX_RECORD"), "a");
    return f;
}
int nvtxRangePushA(const char *name) { fprintf(out(), "+%s\n", name); fflush(out()); return 0; }
int nvtxRangePop(void) { fprintf(out(), "-\n"); fflush(out()); return 0; }
"""


@pytest.mark.slow
def test_nvtx_pushes_one_named_range_per_op(caps, tmp_path):
    """--nvtx through a stand-in libnvToolsExt.so.1 that records its calls (the CUDA toolkit's is not here)."""
    import shutil  # noqa: PLC0415

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang-14")
    if cc is None:
        pytest.skip("no C compiler to build the recording NVTX library")
    (tmp_path / "nvtx.c").write_text(_NVTX_RECORDER)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libnvToolsExt.so.1"), str(tmp_path / "nvtx.c")],
                   check=True)
    record = tmp_path / "ranges.txt"
    env = {**os.environ, "LD_LIBRARY_PATH": f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}",
           "NVTX_RECORD": str(record)}
    r = subprocess.run([sys.executable, "-m", "wrpkit.cli", "profile", str(caps["while_if"]), "--nvtx", "--repeat",
                        "2", "--warmup", "1", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    ops = json.loads(r.stdout)["ops"]
    lines = record.read_text().splitlines()
    assert lines.count("-") == sum(1 for x in lines if x.startswith("+"))  # every push popped
    extra = ("+empty step", "+whole graph replay", "+launch floor", "+launch calibration")
    names = [x[1:] for x in lines if x.startswith("+") and x not in extra]
    per_round = [f"{o['seq']} {o['kernel'] or o['op']}" for o in ops]
    assert names == per_round * 3  # warmup and timed rounds alike: "SEQ KERNEL" per op run
    assert lines.count("+whole graph replay") == 3 and lines.count("+empty step") == 3 * 16
    assert lines.count("+launch floor") == 3 * 16 and lines.count("+launch calibration") == 3  # CPU: launch floor


def test_nvtx_without_the_library_is_refused_before_profiling(caps):
    import ctypes.util  # noqa: PLC0415

    if ctypes.util.find_library("nvToolsExt"):
        pytest.skip("an NVTX library is installed here")
    r = wrp("profile", caps["unequal"], "--nvtx", "--json")
    assert r.exit_code == 2 and "NVTX" in json.loads(r.stdout)["error"], r.output


@pytest.mark.cuda
def test_cuda_profile_times_with_events_and_matches_trace_numbering(tmp_path):
    if not wp.is_cuda_available():
        pytest.skip("no CUDA device")
    path = pp.capture_while_if(tmp_path / "wif_cuda.wrp", device="cuda:0")
    p = wrpkit.profile(path, device="cuda:0", repeat=3)
    assert p.timer == "cuda-events" and p.floor_ms >= 0
    t = wrpkit.trace(path, device="cuda:0")
    assert [_key(o) for o in p.ops] == [_key(o) for o in t.ops]
    assert p.kernels[0]["name"] == "k_heavy"
    if _has_native():
        n = wrpkit.profile(path, device="cuda:0", engine="native", repeat=2)
        assert n.timer == "host" and [_key(o) for o in n.ops] == [_key(o) for o in t.ops]


@pytest.mark.cuda
def test_cuda_profile_with_nvtx_and_trace_events(tmp_path):
    """On a GPU: --nvtx with the real NVTX library (no stub), CUDA events, and an -o file that keeps the rules."""
    import ctypes.util  # noqa: PLC0415

    if not wp.is_cuda_available():
        pytest.skip("no CUDA device")
    path = pp.capture_while_if(tmp_path / "wif_cuda.wrp", device="cuda:0")
    out = tmp_path / "cuda.trace.json"
    args = ["profile", path, "--device", "cuda:0", "--repeat", "2", "-o", out, "--json"]
    if ctypes.util.find_library("nvToolsExt"):
        args.append("--nvtx")
    r = wrp(*args)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["timer"] == "cuda-events" and d["floor_ms"] >= 0
    assert check_trace_event_file(out)["ops"] == len(d["ops"])
    assert [o["kernel"] for o in d["ops"]][:2] == ["k_light", "k_count_down"]


# ---------------------------------------------------------------------------
# wrp graph --profile
# ---------------------------------------------------------------------------

from test_graph import Page, browser  # noqa: E402,F401  (the module's Chromium fixture)


@pytest.fixture(scope="module")
def repeated(tmp_path_factory) -> Path:
    """Five repeats of [k_light, k_heavy]: `wrp graph` folds them into one ×5 group."""
    d = tmp_path_factory.mktemp("repeated")
    a = pp.unequal_arrays()
    with wrpkit.capture(device="cpu") as rec:
        for _ in range(5):
            wp.launch(pp.k_light, dim=pp.N, inputs=[a["x"], a["y"]], device="cpu")
            wp.launch(pp.k_heavy, dim=pp.N, inputs=[a["y"], a["z"], 200], device="cpu")
    return rec.save(d / "repeated.wrp", inputs={"x": a["x"]}, outputs={"y": a["y"], "z": a["z"]})


def _items(items):
    for it in items:
        yield it
        if it.is_group:
            yield from _items(it.children)
            for rep in it.rest:
                yield from _items(rep)


@pytest.mark.slow
def test_graph_times_are_the_profile_sums_and_groups_add_up(caps, repeated, tmp_path):
    from wrpkit.debug import graph as g  # noqa: PLC0415
    from wrpkit.debug.profile_format import load_profile  # noqa: PLC0415

    for path in (caps["while_if"], repeated):
        out = tmp_path / (path.stem + ".json")
        r = wrp("profile", path, "-o", out, "--repeat", "2")
        assert r.exit_code == 0, r.output
        prof = load_profile(out)
        gr = g.build_graph(wrpkit.open_capture(path).program, profile=prof)
        per_path: dict = {}
        for e in json.loads(out.read_text())["traceEvents"]:
            if e["ph"] == "X" and "seq" in e["args"]:
                per_path[e["args"]["path"]] = per_path.get(e["args"]["path"], 0.0) + e["args"]["ms"]
        leaves = [it for it in _items(gr.items) if not it.is_group]
        assert {it.index: it.time[0] for it in leaves} == pytest.approx(per_path)
        for it in _items(gr.items):
            if it.is_group:
                inner = [c for c in _items(it.children) if not c.is_group]
                inner += [c for rep in it.rest for c in _items(rep) if not c.is_group]
                assert it.time[0] == pytest.approx(sum(c.time[0] for c in inner))
                assert it.time[1] == sum(c.time[1] for c in inner)
        if path == repeated:
            (rep,) = [it for it in gr.items if it.kind == "REPEAT"]
            assert rep.count == 5 and rep.time[0] == pytest.approx(prof["total_ms"])
    # a profile of another capture, and a file that is no profile, are refused
    r = wrp("graph", repeated, "--profile", tmp_path / "while_if.json", "-o", tmp_path / "x.html", "--json")
    assert r.exit_code == 2 and "not of this capture" in json.loads(r.stdout)["error"], r.output
    (tmp_path / "junk.json").write_text('{"traceEvents": 3}')
    assert wrp("graph", repeated, "--profile", tmp_path / "junk.json", "-o", tmp_path / "x.html").exit_code == 3
    assert not (tmp_path / "x.html").exists()
    for bad in ('{"traceEvents": [{"ph": "X", "args": {"seq": 0, "path": "0", "ms": NaN}}]}',
                '{"traceEvents": [{"ph": "X", "args": {"seq": 0, "path": "0", "ms": -1}}]}',
                '{"format": "wrpkit-profile/1", "ops": [null]}'):
        (tmp_path / "bad.json").write_text(bad)
        assert wrp("graph", repeated, "--profile", tmp_path / "bad.json", "-o", tmp_path / "x.html").exit_code == 3
    # odd metadata in an edited file is not trusted: numbers must be numbers, the rest becomes text
    edited = json.loads((tmp_path / "repeated.json").read_text())
    edited["otherData"]["wrpkit"].update({"total_ms": "lots", "replay_ms": [1], "engine": "<script>x</script>"})
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    prof = load_profile(tmp_path / "edited.json")
    assert prof["replay_ms"] is None and prof["total_ms"] == pytest.approx(sum(p["ms"] for p in prof["paths"].values()))
    assert prof["engine"] == "<script>x</script>"  # escaped where the page shows it
    assert not (tmp_path / "x.html").exists()
    r = wrp("graph", repeated, "--profile", tmp_path / "repeated.json", "-o", tmp_path / "r.svg")
    assert r.exit_code == 0 and "#bd0026" in (tmp_path / "r.svg").read_text()  # the ×5 group is the heat


@pytest.mark.slow
def test_browser_heat_legend_times_and_details(browser, caps, repeated, tmp_path):
    prof = tmp_path / "wif.json"
    r = wrp("profile", caps["while_if"], "--json", "-o", prof, "--repeat", "2", "--clock", "cpu")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    html = tmp_path / "wif.html"
    assert wrp("graph", caps["while_if"], "--profile", prof, "-o", html).exit_code == 0
    page = Page(browser, html)
    total = d["total_ms"]
    per_path: dict = {}
    for o in d["ops"]:
        per_path[o["path"]] = per_path.get(o["path"], 0.0) + o["ms"]
    nodes = page.js("() => Array.from(document.querySelectorAll('#graph g.node')).map(n => "
                    "[n.dataset.id, n.dataset.kind, n.dataset.share, n.dataset.fill, n.textContent])")
    heat = page.js("() => window.wrpGraph.data.profile.heat")
    shown = {nid[1:]: (float(share), fill, text) for nid, kind, share, fill, text in nodes if nid.startswith("o")}
    assert set(shown) == set(per_path)  # every op row has its time
    from wrpkit.debug.graph import heat_colour  # noqa: PLC0415

    for p, (share, fill, text) in shown.items():
        assert share == pytest.approx(per_path[p] / total, abs=1e-4)
        assert fill == heat_colour(per_path[p] / total) and " ms " in text
    assert shown["1.1.0"][1] == heat[0][1]  # k_heavy: the hottest class
    legend = page.js("() => document.getElementById('heat').textContent")
    assert "share of" in legend and "≥35%" in legend and "<1%" in legend
    # the details panel of the hottest op: its total, share and runs
    page.page.click("#graph g.node[data-id='o1.1.0'] rect")
    rows = page.js("() => Array.from(document.querySelectorAll('#time tr')).map(r => r.textContent)")
    assert rows[0].startswith("total") and rows[0].endswith(" ms")
    assert float(rows[0][len("total"):-3]) == pytest.approx(per_path["1.1.0"], rel=1e-3)
    assert any(r.startswith("runs2") for r in rows), rows
    # a folded WHILE shows its summed time and takes its heat
    page.js("() => window.wrpGraph.toggle('g1', false)")
    share = page.js("() => document.querySelector(\"#graph g.node[data-id='g1']\").dataset.share")
    while_ms = sum(v for p, v in per_path.items() if p.startswith("1."))
    assert float(share) == pytest.approx(while_ms / total, abs=1e-4)
    page.page.screenshot(path=str(tmp_path / "wif.png"))
    page.check_clean()
    # a folded ×5 group: its summed time, and its repeats keep their own when unfolded
    prof2 = tmp_path / "rep.json"
    assert wrp("profile", repeated, "-o", prof2, "--repeat", "2").exit_code == 0
    html2 = tmp_path / "rep.html"
    assert wrp("graph", repeated, "--profile", prof2, "-o", html2).exit_code == 0
    page = Page(browser, html2)
    rep_id = page.js("() => window.wrpGraph.data.items.find(i => i.k === 'REPEAT').id")
    assert float(page.js(f"() => document.querySelector(\"#graph g.node[data-id='{rep_id}']\").dataset.share")) \
        == pytest.approx(1.0, abs=1e-3)
    page.js(f"() => window.wrpGraph.toggle('{rep_id}', true)")
    shares = page.js("() => Array.from(document.querySelectorAll('#graph g.node[data-kind=KERNEL_LAUNCH]'))"
                     ".map(n => +n.dataset.share)")
    assert len(shares) == 10 and sum(shares) == pytest.approx(1.0, abs=2e-3)
    page.check_clean()
    # an edited profile's text is shown as text, and odd numbers do not break the page
    edited = json.loads(prof2.read_text())
    edited["otherData"]["wrpkit"].update({"replay_ms": "x", "engine": "<img src=x onerror=alert(1)>"})
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    assert wrp("graph", repeated, "--profile", tmp_path / "edited.json", "-o", html2).exit_code == 0
    page = Page(browser, html2)
    assert "<img src=x" in page.js("() => document.getElementById('heat').textContent")
    assert page.js("() => document.querySelectorAll('#heat img').length") == 0
    page.check_clean()


STOCK_SCRIPT = TESTS_DIR / "profile_stock_program.py"


@pytest.fixture(scope="module")
def stock(tmp_path_factory) -> Path:
    """A capture of tests/profile_stock_program.py made by stock Warp alone (kernels under __main__, no types)."""
    path = tmp_path_factory.mktemp("profile_stock") / "stock.wrp"
    r = subprocess.run([sys.executable, str(STOCK_SCRIPT), str(path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return path


def _stock_order(steps: int) -> list:
    """The kernels the step launches for ``steps``: integrate, then per WHILE iteration count_down and the IF's pick."""
    out = ["integrate"]
    for left in range(steps - 1, -1, -1):
        out += ["count_down", "relax" if left % 2 else "damp"]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_kernels_types_a_stock_capture_from_the_users_script(stock, engine):
    native_or_skip(engine)
    import profile_stock_program as sp  # noqa: PLC0415

    plain = wrpkit.profile(stock, engine=engine, repeat=1, warmup=0)
    assert plain.typing is None
    typed = wrpkit.profile(stock, engine=engine, repeat=2, warmup=0, kernels=[STOCK_SCRIPT],
                           inputs={"steps": np.array([5], np.int32)})
    assert {k["kernel"] for k in typed.typing["kernels"]} == {"integrate", "count_down", "relax", "damp"}
    assert all(k["matched"] and k["code"] == "same" for k in typed.typing["kernels"]), typed.typing
    assert [o["kernel"] for o in plain.ops] == _stock_order(sp.STEPS)
    assert [o["kernel"] for o in typed.ops] == _stock_order(5)
    assert typed.to_json()["typing"] == typed.typing
    # relax runs RELAX inner steps per thread, damp one: relax has more of the time
    per = {k["name"]: k for k in typed.kernels}
    assert per["relax"]["median_ms"] > per["damp"]["median_ms"]
    # Untyped, an int32 array of the right byte size passes as raw bytes; typed, the vec3 binding refuses it.
    wrong = np.zeros((sp.N, 3), np.int32)
    assert len(wrpkit.profile(stock, engine=engine, repeat=1, warmup=0, inputs={"pos": wrong}).ops) == 7
    with pytest.raises(wrpkit.WrpError, match="vec3"):
        wrpkit.profile(stock, engine=engine, repeat=1, warmup=0, inputs={"pos": wrong}, kernels=[STOCK_SCRIPT])


@pytest.mark.slow
def test_kernels_cli_reports_the_matches_and_refuses_a_bad_file(stock, tmp_path):
    r = subprocess.run([sys.executable, "-m", "wrpkit.cli", "profile", str(stock), "--repeat", "1", "--kernels",
                        str(STOCK_SCRIPT)], capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"},
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "--kernels: 4 of 4 kernel(s) typed from profile_stock_program.py" in r.stdout
    # 80 columns, but for the lines that quote the user's own path (longer under xdist's worker folders)
    assert max(len(x) for x in r.stdout.splitlines() if str(stock.parent) not in x) <= 80
    r = wrp("profile", stock, "--repeat", "1", "--kernels", STOCK_SCRIPT, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["typing"]["kernels"] and {"kernels", "ops", "total_ms", "replay_ms"} <= set(d)
    assert wrp("profile", stock, "--kernels", tmp_path / "missing.py").exit_code == 2
    broken = tmp_path / "broken.py"
    broken.write_text("import warp as wp\nthis is not python\n")
    r = wrp("profile", stock, "--kernels", broken, "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["exit_code"] == 2
    other = tmp_path / "other.py"
    other.write_text("import warp as wp\n\n@wp.kernel\ndef unrelated(a: wp.array(dtype=float)):\n    a[0] = 1.0\n")
    assert wrp("profile", stock, "--kernels", other).exit_code == 2  # none of its kernels matches


def test_trace_event_file_of_a_stock_while_with_if_keeps_the_formats_rules(stock, tmp_path):
    out = tmp_path / "stock.trace.json"
    r = wrp("profile", stock, "--kernels", STOCK_SCRIPT, "--input", f"steps={_npy(tmp_path, [4])}", "--repeat", "2",
            "-o", out, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    info = check_trace_event_file(out)
    assert info["ops"] == len(d["ops"]) == len(_stock_order(4))
    evs = [e for e in info["data"]["traceEvents"] if e["ph"] == "X"]
    # microseconds: each op event is its median in ms times 1000; end to end, in run order
    ops = [e for e in evs if "seq" in e["args"]]
    assert [e["name"] for e in ops] == _stock_order(4)
    t = 0.0
    for e, o in zip(ops, d["ops"]):
        assert e["ts"] == pytest.approx(t, abs=1e-3) and e["dur"] == pytest.approx(o["ms"] * 1e3, abs=1e-3)
        t = e["ts"] + e["dur"]
    assert [e["args"]["iteration"] for e in evs if e["cat"] == "WHILE iteration"] == [0, 1, 2, 3]
    assert [e["args"]["branch"] for e in evs if e["cat"] == "IF"] == ["then", "else", "then", "else"]
    names = {e["name"]: e["args"]["name"] for e in info["data"]["traceEvents"] if e["ph"] == "M"}
    assert set(names) == {"process_name", "thread_name"} and "stock.wrp" in names["process_name"]


def _npy(d: Path, values) -> Path:
    path = d / "steps.npy"
    np.save(path, np.array(values, np.int32))
    return path


@pytest.mark.parametrize("bad, rule", [
    ('{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": NaN, "pid": 1, "tid": 1}]}', "NaN"),
    ('{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 2, "pid": 1, "tid": 1},'
     ' {"name": "b", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}', "overlaps"),
    ('{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 2, "tid": 1}]}', "pid"),
    ('{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "pid": 1, "tid": 1}]}', "dur"),
    ('{"traceEvents": [], "displayTimeUnit": "us"}', "displayTimeUnit"),
    ('[{"name": "a", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]', "object form"),
    # a child that ends where its parent ends in decimal, but 5e-12 us later in floating point (ts + dur)
    ('{"traceEvents": [{"name": "a", "ph": "X", "ts": 25935.084, "dur": 26696.013, "pid": 1, "tid": 1},'
     ' {"name": "b", "ph": "X", "ts": 25936.169, "dur": 26694.928, "pid": 1, "tid": 1}]}', "overlaps"),
])
def test_trace_event_rules_refuse_what_viewers_refuse(tmp_path, bad, rule):
    path = tmp_path / "bad.json"
    path.write_text(bad)
    with pytest.raises(AssertionError, match=rule):
        check_trace_event_file(path)
    # the same events on two threads, or nested, are fine
    path.write_text('{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 2, "pid": 1, "tid": 1},'
                    ' {"name": "b", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 2},'
                    ' {"name": "c", "ph": "X", "ts": 0.5, "dur": 1.5, "pid": 1, "tid": 1}]}')
    assert check_trace_event_file(path)["events"] == 3


def test_auto_clock_takes_cpu_time_when_the_thread_waits_and_wall_time_when_it_works():
    """The choice is made on real clocks: a launch that waits (sleeps, as a thread waiting for a core
    does) costs wall time but no CPU time, so CPU time is chosen."""
    import time as _time  # noqa: PLC0415

    from wrpkit.debug.profile_timers import choose_clock  # noqa: PLC0415

    waits = choose_clock(lambda: _time.sleep(0.01))
    assert waits["clock"] == "cpu" and waits["wall_ms"] > 5 * max(waits["cpu_ms"], 0.1), waits

    def work():
        t = _time.thread_time()
        while _time.thread_time() - t < 0.01:
            pass

    # Computing, the thread waits only if the machine is busy (this test may share it): then CPU time is
    # the right clock, and the choice must follow the figures it reports.
    from wrpkit.debug.profile_timers import BUSY_WALL_OVER_CPU  # noqa: PLC0415

    busy = choose_clock(work)
    assert busy["cpu_ms"] >= 9.0  # it did compute for 10 ms of CPU time each time
    assert busy["clock"] == ("cpu" if busy["wall_ms"] > BUSY_WALL_OVER_CPU * busy["cpu_ms"] else "wall"), busy


def test_low_coverage_says_so_and_names_the_other_clock():
    from wrpkit.debug.profile_result import MIN_COVERAGE, ProfileResult  # noqa: PLC0415

    low = ProfileResult("x.wrp", "python", "cpu", total_ms=0.2, replay_ms=1.0, timer="host")
    assert "20%" in low.coverage_warning and "--clock cpu" in low.coverage_warning
    assert "--clock wall" in ProfileResult("x.wrp", "python", "cpu", total_ms=0.2, replay_ms=1.0,
                                           timer="host-cpu").coverage_warning
    assert ProfileResult("x.wrp", "python", "cpu", total_ms=MIN_COVERAGE, replay_ms=1.0).coverage_warning is None
    assert low.to_json()["coverage_warning"] == low.coverage_warning
