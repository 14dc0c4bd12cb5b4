"""Warp's own APIC tests as a compatibility suite for wrpkit.

Stock Warp's test files (``warp/tests/test_apic*.py`` of the installed wheel)
write many ``.wrp`` files that no wrpkit test would think of: graphs saved
twice, empty graphs, meshes, handles, scratch arrays.  This module runs those
tests on the CPU with a hook around ``wp.capture_save`` that keeps a copy of
every file a save leaves behind (before the test edits or deletes it), then
decides for each kept file whether stock Warp loads and replays it, and with
what result.  ``tests/compat/test_warp_compat.py`` (opt-in: ``WRPKIT_WARP_COMPAT=1``)
checks that every such file is accepted and replayed identically by
``wrp replay`` (both engines) and ``wrp-replay``.

Command line (each step runs in its own process, as Warp's tests patch Warp)::

    python tests/warp_compat.py collect KEEP_DIR      # run Warp's tests, keep every saved file
    python tests/warp_compat.py stock FILE.wrp OUT.npz  # stock load + one launch; every binding
    python tests/warp_compat.py stock-all KEEP_DIR      # the same for every kept file (NNNN/stock.*)
    python tests/warp_compat.py check-all KEEP_DIR WRP_REPLAY  # every wrpkit route on those stock loads
    python tests/warp_compat.py list KEEP_DIR           # tests/warp_compat_cases.txt's text

Nothing here mocks Warp: the hook calls the real ``capture_save`` and only
copies what it wrote.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import unittest
from pathlib import Path

import numpy as np

from wrpkit.checks.compare import same_bytes_but_handles

#: The wheel's APIC test modules, in the order they are run.
WARP_TEST_MODULES = ("warp.tests.test_apic", "warp.tests.test_apic_load_from_bytes",
                     "warp.tests.test_apic_mesh", "warp.tests.test_apic_utility_algorithms")


def _copy_file(src: Path, dst: Path) -> None:
    """Byte copy with builtins only: Warp's tests patch ``os.replace`` and ``shutil.copy2``."""
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data)


def _calling_test() -> str:
    """``module.Class.test_name`` of the Warp test that called ``capture_save`` (or ``?``)."""
    for frame in inspect.stack()[2:]:
        self_obj = frame.frame.f_locals.get("self")
        if isinstance(self_obj, unittest.TestCase):
            return self_obj.id()
        test = frame.frame.f_locals.get("test")
        if isinstance(test, unittest.TestCase):
            return test.id()
    return "?"


def collect(keep_dir: Path) -> list:
    """Run Warp's APIC tests on the CPU and keep a copy of every file ``capture_save`` wrote.

    Args:
        keep_dir: Where the copies go, one folder per save (``NNNN/capture.wrp`` and
            ``NNNN/capture_modules/``), plus ``cases.json`` listing them.

    Returns:
        ``[{"case": "NNNN", "test": id, "file": path}]``, one per successful save.
    """
    import warp as wp  # noqa: PLC0415

    keep_dir.mkdir(parents=True, exist_ok=True)
    real_save = wp.capture_save
    cases: list = []

    def keeping_save(graph, path, *args, **kwargs):
        result = real_save(graph, path, *args, **kwargs)
        wrp_path = Path(os.path.abspath(path if str(path).endswith(".wrp") else str(path) + ".wrp"))
        mods = wrp_path.with_name(wrp_path.name[:-4] + "_modules")
        if wrp_path.is_file():
            case = f"{len(cases):04d}"
            dst = keep_dir / case
            (dst / "capture_modules").mkdir(parents=True)
            _copy_file(wrp_path, dst / "capture.wrp")
            if mods.is_dir():
                for f in mods.iterdir():
                    if f.is_file():
                        _copy_file(f, dst / "capture_modules" / f.name)
            cases.append({"case": case, "test": _calling_test(), "file": str(dst / "capture.wrp")})
        return result

    wp.capture_save = keeping_save
    suite = unittest.TestSuite()
    for name in WARP_TEST_MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a missing module only shrinks the suite
            print(f"skip {name}: {e}", file=sys.stderr)
            continue
        suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(mod))
    # Only CPU tests: this machine's CUDA tests would skip anyway, and the suite checks CPU replays.
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=0)
    result = runner.run(suite)
    (keep_dir / "cases.json").write_text(json.dumps(
        {"cases": cases, "warp": wp.config.version, "tests_run": result.testsRun,
         "failures": len(result.failures), "errors": len(result.errors)}, indent=1))
    return cases


def stock_replay(wrp: Path, out: Path) -> dict:
    """Load ``wrp`` with stock Warp on the CPU, launch it once, save every binding to ``out``.

    Binding names and sizes come from Warp itself (``wp_apic_get_num_params``,
    ``wp_apic_get_param_name``, ``wp_apic_get_param_size``), so a repeated name
    is read as Warp's loader resolves it.

    Returns:
        ``{"loaded": bool, "error": str | None, "bindings": [names]}``.
    """
    import ctypes  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415
    import warp as wp  # noqa: PLC0415
    import warp._src.context as wp_context  # noqa: PLC0415

    wp.config.quiet = True
    wp.init()
    runtime = wp_context.runtime
    try:
        graph = wp.capture_load(str(wrp), device="cpu")
        wp.capture_launch(graph)
        wp.synchronize_device("cpu")
    except Exception as e:  # noqa: BLE001 - what stock Warp refuses is the answer, not a failure
        return {"loaded": False, "error": f"{type(e).__name__}: {e}", "bindings": []}
    core = runtime.core
    core.wp_apic_get_param_name.restype = ctypes.c_char_p
    core.wp_apic_get_param_size.restype = ctypes.c_size_t
    handle = graph._native_graph
    names = []
    for i in range(core.wp_apic_get_num_params(handle)):
        n = core.wp_apic_get_param_name(handle, i).decode()
        if n not in names:
            names.append(n)
    arrays = {}
    for n in names:
        size = core.wp_apic_get_param_size(handle, n.encode())
        buf = wp.zeros(size, dtype=wp.uint8, device="cpu")
        graph.get_param(n, buf)
        arrays[n] = buf.numpy().copy()
    np.savez(out, **arrays)
    return {"loaded": True, "error": None, "bindings": names}


def stock_all(keep_dir: Path) -> dict:
    """:func:`stock_replay` of every kept case, in this one process; writes ``NNNN/stock.json``.

    Returns:
        ``{case: stock_replay's answer}``.
    """
    cases = json.loads((keep_dir / "cases.json").read_text())["cases"]
    out = {}
    for c in cases:
        d = keep_dir / c["case"]
        if (d / "stock.json").is_file():
            out[c["case"]] = json.loads((d / "stock.json").read_text())
            continue
        res = stock_replay(d / "capture.wrp", d / "stock.npz")
        (d / "stock.json").write_text(json.dumps(res))
        out[c["case"]] = res
    return out


def _run(cmd: list, timeout: float = 600):
    import subprocess  # noqa: PLC0415

    try:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout} s")


def handle_slots(wrp: Path) -> dict:
    """``{binding name: [byte offsets]}`` of the 8-byte handle slots Warp patches at load.

    A mesh or other handle recorded in a region (the file's pointer locations)
    is rewritten by every load with an address of that process, so two
    replays agree on whether a slot holds a handle, never on its value.
    """
    from wrpkit.formats import wrp1  # noqa: PLC0415

    prog = wrp1.decode_wrp1(wrp.read_bytes())
    by_region: dict = {}
    for pl in prog.pointer_locations:
        slots = by_region.setdefault(pl.region_id, [])
        for i in range(pl.count):
            slots.append(pl.offset + i * pl.stride)
    return {name: by_region.get(rid, []) for name, rid in prog.binding_map().items()}


def check_case(case_dir: Path, wrp_replay: Path, python: str = sys.executable) -> dict:
    """Every wrpkit route on one kept file that stock Warp loaded; what each said.

    Routes: ``wrp validate``, ``wrp replay --engine python`` and ``--engine
    native`` (``--output``: every binding after one replay), and
    ``wrp-replay --output NAME=FILE.npy`` for every binding.  Each binding's
    bytes must equal stock Warp's (:func:`stock_replay`, ``stock.npz``).

    Returns:
        ``{"ok": bool, "problems": [text], "warnings": bool}``.
    """
    wrp = case_dir / "capture.wrp"
    stock = json.loads((case_dir / "stock.json").read_text())
    problems = []
    with np.load(case_dir / "stock.npz") as z:
        want = {n: z[n] for n in z.files}
    slots = handle_slots(wrp)
    p = _run([python, "-m", "wrpkit.cli", "validate", wrp])
    warned = "warning" in (p.stdout + p.stderr).lower()
    if p.returncode != 0:
        problems.append(f"wrp validate exit {p.returncode}: {(p.stdout + p.stderr).strip()[-400:]}")
    for engine in ("python", "native"):
        out = case_dir / f"wrpkit_{engine}.npz"
        p = _run([python, "-m", "wrpkit.cli", "replay", wrp, "--engine", engine, "--output", out])
        if p.returncode != 0:
            problems.append(f"wrp replay --engine {engine} exit {p.returncode}: {p.stderr.strip()[-400:]}")
            continue
        with np.load(out) as z:
            for n in stock["bindings"]:
                if n not in z.files:
                    problems.append(f"wrp replay --engine {engine}: binding {n!r} missing from --output")
                elif not same_bytes_but_handles(z[n], want[n], slots.get(n, ())):
                    problems.append(f"wrp replay --engine {engine}: binding {n!r} differs from stock Warp")
    outs = [f"--output={n}={case_dir / f'native_{i}.npy'}" for i, n in enumerate(stock["bindings"])]
    p = _run([wrp_replay, wrp, *outs])
    if p.returncode != 0:
        problems.append(f"wrp-replay exit {p.returncode}: {p.stderr.strip()[-400:]}")
    else:
        for i, n in enumerate(stock["bindings"]):
            got = np.load(case_dir / f"native_{i}.npy")
            if not same_bytes_but_handles(got, want[n], slots.get(n, ())):
                problems.append(f"wrp-replay: binding {n!r} differs from stock Warp")
    problem = convert_verdict_problem(wrp, case_dir / "roundtrip")
    if problem:
        problems.append(problem)
    for v in _hostile_variants(wrp, case_dir / "hostile"):
        problem = convert_verdict_problem(v.path, case_dir / "roundtrip")
        if problem:
            problems.append(f"{v.name}: {problem}")
    return {"ok": not problems, "problems": problems, "warnings": warned}


def convert_verdict_problem(src: Path, work: Path) -> str:
    """What breaks "one verdict per file across convert directions" for ``src``, or "".

    ``src`` -> ``.json`` must be refused, or its ``.json`` must convert back to a ``.wrp`` (and a
    ``.wrpk``): what converts out converts back (issue 40, item 6)."""
    from wrpkit.cli.convert import _edit_problems  # noqa: PLC0415
    from wrpkit.errors import WrpError  # noqa: PLC0415
    from wrpkit.formats.convert import convert  # noqa: PLC0415

    work.mkdir(parents=True, exist_ok=True)
    out = work / (src.stem + ".json")
    try:
        convert(src, out, validate=_edit_problems)
    except WrpError:
        return ""
    for back in (work / (src.stem + "_back.wrp"), work / (src.stem + "_back.wrpk")):
        try:
            convert(out, back, validate=_edit_problems)
        except WrpError as e:
            return f"converts to .json but its .json does not convert back to {back.suffix}: {e}"
    return ""


def _hostile_variants(wrp: Path, out: Path) -> list:
    """Damaged copies of a kept file (tests/hostile.py), regular files only; [] for a file without one."""
    import hostile  # noqa: PLC0415

    try:
        return [v for v in hostile.generate(wrp, out) if v.path.is_file() and not v.path.is_symlink()]
    except Exception:  # noqa: BLE001  (a file hostile.py has no damage for: no kernel launch with relocations)
        return []


def check_all(keep_dir: Path, wrp_replay: Path, workers: int = 3) -> dict:
    """:func:`check_case` of every kept file stock Warp loaded; ``{case: answer}`` (also ``check.json``)."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    cases = json.loads((keep_dir / "cases.json").read_text())["cases"]
    todo = [c["case"] for c in cases
            if json.loads((keep_dir / c["case"] / "stock.json").read_text())["loaded"]]
    with ThreadPoolExecutor(workers) as pool:
        answers = dict(zip(todo, pool.map(lambda c: check_case(keep_dir / c, wrp_replay), todo)))
    (keep_dir / "check.json").write_text(json.dumps(answers, indent=1))
    return answers


def case_list(keep_dir: Path) -> str:
    """The committed list's text: one line per Warp test whose saves stock Warp loads (and how many)."""
    cases = json.loads((keep_dir / "cases.json").read_text())["cases"]
    counts: dict = {}
    for c in cases:
        if json.loads((keep_dir / c["case"] / "stock.json").read_text())["loaded"]:
            counts[c["test"]] = counts.get(c["test"], 0) + 1
    return "".join(f"{t} {n}\n" for t, n in sorted(counts.items()))


def main(argv: list) -> int:
    """``collect KEEP_DIR``, ``stock FILE.wrp OUT.npz`` or ``stock-all KEEP_DIR`` (prints JSON)."""
    if argv[:1] == ["collect"] and len(argv) == 2:
        cases = collect(Path(argv[1]))
        print(json.dumps({"cases": len(cases)}))
        return 0
    if argv[:1] == ["stock"] and len(argv) == 3:
        print(json.dumps(stock_replay(Path(argv[1]), Path(argv[2]))))
        return 0
    if argv[:1] == ["check-all"] and len(argv) == 3:
        res = check_all(Path(argv[1]), Path(argv[2]))
        bad = {c: r["problems"] for c, r in res.items() if not r["ok"]}
        print(json.dumps({"checked": len(res), "failed": bad}, indent=1))
        return 1 if bad else 0
    if argv[:1] == ["list"] and len(argv) == 2:
        sys.stdout.write(case_list(Path(argv[1])))
        return 0
    if argv[:1] == ["stock-all"] and len(argv) == 2:
        res = stock_all(Path(argv[1]))
        print(json.dumps({"cases": len(res), "loaded": sum(r["loaded"] for r in res.values())}))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
