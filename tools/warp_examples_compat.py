"""Warp's own examples as a compatibility suite for wrpkit (issue 38, item 1).

The wheel of ``warp-lang`` ships example programs written by Warp's authors in
``warp/examples/<group>/example_*.py``.  This tool finds every one of them (new
examples in a future wheel are picked up as they are), and for each:

1. **captures** one step on the CPU.  The example runs as ``python example.py``
   would run it (``runpy``, ``__name__ == "__main__"``), in a child process with
   a timeout, with these command-line options where its parser defines them:
   ``--device cpu``, ``--headless``, ``--quiet``, ``--stage-path None`` (no USD
   file), ``--num-frames 2`` and small iteration counts (``--train-iters``,
   ``--num-iters``, ``--iters``, ``--iterations``: 2).  The class ``Example``
   is hooked as it is defined: the first time the example calls its
   ``step()`` (or ``render()``, for an example without ``step``), the call
   runs as usual (it builds the modules), then the method is called once more
   between stock ``wp.capture_begin(device="cpu", apic=True)`` and
   ``wp.capture_end()``, the graph is saved with stock
   ``wp.capture_save(graph, path, inputs=STATE, outputs=STATE)`` and the
   example is stopped.  A script without such a class (most ``tile/``
   examples) has its first ``wp.launch``/``wp.launch_tiled`` of a kernel of
   its own file captured the same way (run, then issued again inside the
   capture), with the launch's array arguments, named by the kernel's
   parameter names, as STATE.  ``wp.clear_kernel_cache()`` is a no-op in that child
   (``example_spin_lock`` calls it at import, which breaks examples building
   side by side).

   **The state rule**: ``STATE`` holds every ``wp.array`` on the CPU that is an
   attribute of the ``Example`` object (``name``), an item of a list or tuple
   attribute (``name.i``) or an attribute of an object attribute, one level
   down (``name.attr``: e.g. a ``State`` or a FEM field's ``dof_values``),
   named by that path, the first path found for each array kept, taken just
   before the capture.  Each is both an input and an output: a simulation
   step reads and writes its state in place.
2. records **stock Warp's replay**, in a fresh process, as the truth:
   ``wp.capture_load`` + one ``wp.capture_launch``, every binding's bytes
   saved (``graph.get_param``) in ``stock.npz``.  A replay that dies of a
   signal is recorded with the signal's name.
3. runs **every wrpkit route** on the capture and compares with the truth:
   see :data:`ROUTES` (inspect, validate, check, convert round trips, replay
   on both engines, ``wrp-replay`` on ``.wrp`` and ``.wrpk``, annotate from
   the example's own ``.py``, trace, profile, graph, slice in two halves,
   diff with itself and with a twin capture whose one kernel was edited,
   upgrade, regress).  Outputs must be bit-identical to stock's (8-byte
   handle slots Warp patches at load only have to agree on being zero).

An example is skipped, with the reason, when it needs CUDA, USD, a GUI or a
missing package, defines no ``Example`` step, when Warp refuses to capture its
step (Warp's own message), or when stock Warp's own replay fails or crashes
(with what wrpkit's replay says about the same file).

Usage::

    .venv/bin/python tools/warp_examples_compat.py --jobs 2            # everything; writes docs/warp-examples.md
    .venv/bin/python tools/warp_examples_compat.py --only core/example_wave --json out.json
    .venv/bin/python tools/warp_examples_compat.py --keep /tmp/wex    # keep every file made

Exit status: 0 when every route passed on every example stock Warp captures
and replays; 1 when some route failed.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from warp_examples_child import child_capture, child_stock, examples_root  # noqa: E402
from warp_examples_matrix import ROUTES, markdown  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
WRP = [str(BIN / "wrp")] if (BIN / "wrp").exists() else [sys.executable, "-m", "wrpkit.cli"]
WRP_REPLAY = str(BIN / "wrp-replay")
DEFAULT_MARKDOWN = ROOT / "docs" / "warp-examples.md"

#: Seconds allowed to build and capture one example, to replay it, and to run one wrpkit command.
CAPTURE_TIMEOUT = 600
STOCK_TIMEOUT = 300
COMMAND_TIMEOUT = 600


# --------------------------------------------------------------------------------------------
# Discovery (the child processes: warp_examples_child.py; the matrix: warp_examples_matrix.py)


def discover(root: Path | None = None) -> list:
    """``["core/example_wave", ...]``: every ``example_*.py`` below ``root``, sorted."""
    root = root or examples_root()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("example_*.py")
                  if "__pycache__" not in p.parts)


# --------------------------------------------------------------------------------------------
# Parent: one example


def _run(cmd: list, timeout: float = COMMAND_TIMEOUT, cwd=None) -> subprocess.CompletedProcess:
    """Run ``cmd``; a timeout is exit 124 with a message, never an exception."""
    cmd = [str(c) for c in cmd]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return subprocess.CompletedProcess(cmd, 124, out, err + f"\ntimed out after {timeout} s")


def _cmdline(cmd: list) -> str:
    """``cmd`` as one shell-like line, with the venv's paths shortened."""
    return " ".join(str(c).replace(str(BIN) + "/", "") for c in cmd)


def _first_line(text: str) -> str:
    """The most telling line of an error text: the last ``Error:``-like line, else the first."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^(\w+(Error|Exception)|error|Error)\b", ln) or ln.startswith("wrp"):
            return ln[:300]
    return (lines[0] if lines else "(no output)")[:300]


def _signal_text(rc: int) -> str:
    """``SIGSEGV`` for a negative return code, ``a timeout`` for 124, else ``exit N``."""
    if rc == 124:
        return "a timeout"
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit {rc}"


def _classify_skip(text: str) -> str | None:
    """Why an example that failed to build is a skip (needs CUDA, USD, GUI, a package), or None.

    ``text`` is the error (its message, or a child's output: then its last error line is read).
    """
    m = re.search(r"No module named '([\w.]+)'", text) or re.search(r"requires the (\w+) package", text)
    if m:
        pkg = m.group(1).split(".")[0]
        if pkg == "pxr":
            return "needs USD (pxr, usd-core not installed)"
        if pkg in ("pyglet", "OpenGL", "matplotlib", "polyscope", "tkinter"):
            return f"needs a GUI package ({pkg} not installed)"
        return f"needs a missing package ({pkg})"
    text = _first_line(text)
    low = text.lower()
    if "pxr" in low or "usd-core" in low or "usd" in low and "renderer" in low:
        return "needs USD (pxr): " + text
    if "pyglet" in low or "opengl" in low or "display" in low and "no " in low:
        return "needs a GUI (OpenGL/pyglet): " + text
    if re.search(r"cuda|gpu|mempool|mathdx|not supported on (the )?cpu|cpu.*not supported", low):
        return "needs CUDA: " + text
    return None


class Case:
    """One example's files and verdicts: ``routes[route] = ("pass"|"FAIL"|"skip", reason, command)``."""

    def __init__(self, name: str, work: Path):
        self.name = name
        self.py = examples_root() / (name + ".py")
        self.work = work
        self.status = "pending"
        self.reason = ""
        self.routes: dict = {}
        self.meta: dict = {}
        self.seconds = 0.0

    @property
    def wrp(self) -> Path:
        return self.work / "cap" / "capture.wrp"

    def verdict(self, route: str, ok: bool, reason: str = "", cmd=None) -> bool:
        """Record a route's pass or FAIL (with the first line of the reason and the command)."""
        self.routes[route] = ("pass" if ok else "FAIL", "" if ok else reason, _cmdline(cmd) if cmd else "")
        return ok

    def skip_all(self, reason: str) -> None:
        """Every route skipped with ``reason``."""
        for r in ROUTES:
            self.routes.setdefault(r, ("skip", reason, ""))

    @classmethod
    def from_json(cls, record: dict) -> "Case":
        """A case of an earlier run's JSON (``--merge``), without its files."""
        case = cls(record["example"], Path())
        case.status, case.reason, case.seconds = record["status"], record["reason"], record["seconds"]
        case.meta = {"method": record.get("method"), "arrays": dict.fromkeys(record.get("bindings", []))}
        case.routes = {r: (v["verdict"], v["reason"], v["command"]) for r, v in record["routes"].items()}
        return case

    def as_json(self) -> dict:
        """This case as one record of the JSON matrix."""
        return {"example": self.name, "status": self.status, "reason": self.reason, "seconds": self.seconds,
                "method": self.meta.get("method"), "bindings": sorted(self.meta.get("arrays", {})),
                "routes": {r: {"verdict": v[0], "reason": v[1], "command": v[2]} for r, v in self.routes.items()}}


def _python_child(mode: str, *args, log: Path | None = None, timeout=CAPTURE_TIMEOUT) -> subprocess.CompletedProcess:
    """This script in a child process, in ``mode`` (``_capture`` or ``_stock``); its output also in ``log``."""
    p = _run([sys.executable, str(Path(__file__).resolve()), mode, *args], timeout=timeout)
    if log is not None:
        log.write_text(f"$ {_cmdline(p.args)}\nexit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p


def _handle_slots(wrp: Path) -> dict:
    """``{binding: [byte offsets]}`` of the 8-byte slots Warp patches at load (pointer locations)."""
    from wrpkit.formats import wrp1  # noqa: PLC0415

    prog = wrp1.decode_wrp1(wrp.read_bytes())
    by_region: dict = {}
    for pl in prog.pointer_locations:
        slots = by_region.setdefault(pl.region_id, [])
        slots.extend(pl.offset + i * pl.stride for i in range(pl.count))
    return {name: by_region.get(rid, []) for name, rid in prog.binding_map().items()}


def _compare(case: Case, got: dict, what: str) -> str:
    """"" when every binding of ``got`` equals stock's bytes, else what differs."""
    import numpy as np  # noqa: PLC0415

    from wrpkit.checks.compare import same_bytes_but_handles  # noqa: PLC0415

    slots = case.slots
    with np.load(case.work / "stock.npz") as z:
        for n in z.files:
            if n not in got:
                return f"{what}: binding {n!r} missing"
            if not same_bytes_but_handles(got[n], z[n], slots.get(n, ())):
                return f"{what}: binding {n!r} differs from stock Warp's replay"
    return ""


def _load_npz(path: Path) -> dict:
    import numpy as np  # noqa: PLC0415

    with np.load(path) as z:
        return {n: z[n] for n in z.files}


def _same_tree(a: Path, b: Path) -> str:
    """"" when ``a`` (a .wrp) and ``b`` and their module folders are byte-identical, else what differs."""
    if a.read_bytes() != b.read_bytes():
        return f"{b.name} differs from {a.name} ({b.stat().st_size} vs {a.stat().st_size} bytes)"
    ma, mb = a.with_name(a.stem + "_modules"), b.with_name(b.stem + "_modules")
    fa = {p.name: p.read_bytes() for p in ma.iterdir()} if ma.is_dir() else {}
    fb = {p.name: p.read_bytes() for p in mb.iterdir()} if mb.is_dir() else {}
    if fa != fb:
        return f"module folders differ: {sorted(set(fa) ^ set(fb)) or 'contents'}"
    return ""


def _wrp(case: Case, route: str, args: list, ok_codes=(0,), timeout=COMMAND_TIMEOUT):
    """Run ``wrp ARGS``; a FAIL verdict for ``route`` on an unexpected exit.  Returns the process or None."""
    cmd = WRP + list(args)
    p = _run(cmd, timeout=timeout, cwd=case.work)
    if p.returncode not in ok_codes:
        case.verdict(route, False, f"exit {p.returncode}: {_first_line(p.stderr + chr(10) + p.stdout)}", cmd)
        return None
    return p


def _replay_route(case: Case, route: str, src: Path, extra: list, out: Path, check: bool = True) -> None:
    """``wrp replay SRC EXTRA --output OUT --check stock.npz``, and OUT bit-identical to stock's.

    ``check=False`` leaves ``--check`` out: a typed file's bindings have dtypes and shapes that
    stock's raw-byte golden lacks, so only OUT's bytes are compared.
    """
    cmd_args = ["replay", src, *extra, "--output", out]
    if check:
        cmd_args += ["--check", case.work / "stock.npz"]
    if _wrp(case, route, cmd_args) is None:
        return
    problem = _compare(case, _load_npz(out), route)
    case.verdict(route, not problem, problem, WRP + cmd_args)


def _native_route(case: Case, route: str, src: Path) -> None:
    """``wrp-replay SRC --output NAME=FILE.npy ...``, every binding bit-identical to stock's."""
    import numpy as np  # noqa: PLC0415

    names = case.binding_names
    outs = {n: case.work / f"{route.replace(' ', '_').replace('.', '')}_{i}.npy" for i, n in enumerate(names)}
    cmd = [WRP_REPLAY, src, *[f"--output={n}={p}" for n, p in outs.items()]]
    p = _run(cmd, cwd=case.work)
    if p.returncode != 0:
        case.verdict(route, False, f"exit {p.returncode}: {_first_line(p.stderr + chr(10) + p.stdout)}", cmd)
        return
    problem = _compare(case, {n: np.load(f) for n, f in outs.items()}, route)
    case.verdict(route, not problem, problem, cmd)


def _own_kernels(ops_json: dict) -> list:
    """Keys of the kernels the step launches from the example's own file (module ``__main__``)."""
    return [k["kernel_key"] for k in ops_json.get("kernels", [])
            if isinstance(k, dict) and k.get("module_name") == "__main__"]


def _kernel_to_edit(case: Case, ops_json: dict) -> str | None:
    """The name of a ``@wp.kernel`` function of the example's own file that the captured step launches."""
    defs = set()
    for node in ast.walk(ast.parse(case.py.read_text())):
        if isinstance(node, ast.FunctionDef) and any(re.search(r"(^|\.)kernel\b", ast.unparse(d))
                                                     for d in node.decorator_list):
            defs.add(node.name)
    for key in _own_kernels(ops_json):
        name = key.rpartition("__locals__")[2]  # a kernel a factory makes: factory__locals__name
        if name in defs:
            return name
    return None


def _factory_made(ops_json: dict) -> list:
    """The factories (``create_kernel`` of key ``create_kernel__locals__k``) that make every own kernel
    of the step when the example runs; empty where some own kernel is defined at import."""
    keys = _own_kernels(ops_json)
    if not keys or not all("__locals__" in k for k in keys):
        return []
    return sorted({k.partition("__locals__")[0] for k in keys})


def _edited_copy(case: Case, kernel: str, dst: Path) -> None:
    """``dst``: the example's source with one line added at the top of ``kernel``'s body."""
    text = case.py.read_text()
    tree = ast.parse(text)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == kernel)
    first = node.body[0]
    lines = text.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + "_wrpkit_edit = int(1)\n")
    dst.write_text("".join(lines))


def run_example(name: str, work: Path) -> Case:
    """Capture, record stock's truth and run every route on one example; returns its :class:`Case`."""
    t0 = time.time()
    case = Case(name, work)
    try:
        _run_example(case)
    except Exception as e:  # noqa: BLE001 - a bug of this tool is reported in the matrix, not a crash
        case.status = "error"
        case.reason = f"tool error: {type(e).__name__}: {e}"
        case.skip_all(case.reason)
    case.seconds = round(time.time() - t0, 1)
    return case


def _run_example(case: Case) -> None:
    work = case.work
    if work.exists():
        shutil.rmtree(work)
    (work / "cap").mkdir(parents=True)
    p = _python_child("_capture", case.py, work / "cap", log=work / "capture.log")
    meta_file = work / "cap" / "meta.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    case.meta = meta
    if p.returncode == 124:
        case.status, case.reason = "skip", f"building and capturing took over {CAPTURE_TIMEOUT} s on the CPU"
    elif p.returncode != 0 or not meta:
        text = p.stderr + p.stdout
        case.status = "skip"
        case.reason = _classify_skip(text) or f"the example crashed while building ({_signal_text(p.returncode)}): " \
                                               f"{_first_line(text)}"
    elif meta["status"] != "captured":
        case.status = "skip"
        if meta["status"] == "error":
            case.reason = _classify_skip(meta["reason"]) or f"the example fails on the CPU: {meta['reason']}"
        else:
            case.reason = meta["reason"]
    if case.status == "skip":
        case.skip_all(case.reason)
        return
    case.binding_names = list(meta["arrays"])
    # The truth: stock Warp's replay in a fresh process.
    p = _python_child("_stock", case.wrp, work / "stock.npz", json.dumps(case.binding_names), log=work / "stock.log",
                      timeout=STOCK_TIMEOUT)
    stock = {}
    if p.returncode == 0:
        stock = json.loads(p.stdout.strip().splitlines()[-1])
    if p.returncode != 0 or not stock.get("ok"):
        why = stock.get("reason") if stock else (f"no result after {STOCK_TIMEOUT} s" if p.returncode == 124
                                                 else f"died of {_signal_text(p.returncode)}")
        cmd = WRP + ["replay", case.wrp, "--timeout", "120"]
        q = _run(cmd, cwd=work)
        case.status = "skip"
        case.reason = (f"stock Warp's replay fails ({why}); wrp replay: exit {q.returncode} "
                       f"({_first_line(q.stderr + chr(10) + q.stdout)})")
        case.skip_all(case.reason)
        return
    case.status = "ran"
    case.slots = _handle_slots(case.wrp)
    wrp = case.wrp
    # inspect, validate, check
    p = _wrp(case, "inspect", ["inspect", wrp])
    if p:
        case.verdict("inspect", True)
    ops_json: dict = {}
    p = _wrp(case, "inspect --ops --json", ["inspect", wrp, "--ops", "--json"])
    if p:
        try:
            ops_json = json.loads(p.stdout)
            case.verdict("inspect --ops --json", True)
        except ValueError as e:
            case.verdict("inspect --ops --json", False, f"not JSON: {e}", WRP + ["inspect", wrp, "--ops", "--json"])
    for route in ("validate", "check"):
        if _wrp(case, route, [route, wrp]):
            case.verdict(route, True)
    # convert round trips
    wrpk = work / "conv.wrpk"
    if _wrp(case, "convert .wrpk round trip", ["convert", wrp, wrpk, "-q"]) and \
            _wrp(case, "convert .wrpk round trip", ["convert", wrpk, work / "back_k.wrp", "-q"]):
        problem = _same_tree(wrp, work / "back_k.wrp")
        case.verdict("convert .wrpk round trip", not problem, problem,
                     WRP + ["convert", wrpk, work / "back_k.wrp"])
    if _wrp(case, "convert .json round trip", ["convert", wrp, work / "conv.json", "-q"]) and \
            _wrp(case, "convert .json round trip", ["convert", work / "conv.json", work / "back_j.wrp", "-q"]):
        problem = _same_tree(wrp, work / "back_j.wrp")
        case.verdict("convert .json round trip", not problem, problem,
                     WRP + ["convert", work / "conv.json", work / "back_j.wrp"])
    # replays
    _replay_route(case, "replay python", wrp, ["--engine", "python"], work / "out_python.npz")
    _replay_route(case, "replay native", wrp, ["--engine", "native"], work / "out_native.npz")
    _native_route(case, "wrp-replay .wrp", wrp)
    if wrpk.is_file():
        _native_route(case, "wrp-replay .wrpk", wrpk)
    else:
        case.routes.setdefault("wrp-replay .wrpk", ("skip", "no .wrpk: convert failed", ""))
    # annotate, then replay the typed file
    typed = work / "typed.wrp"
    if not _own_kernels(ops_json):
        case.routes["annotate + replay"] = ("skip", _NO_OWN_KERNEL, "")
    elif _factory_made(ops_json):
        # --kernels imports the file without running it: wrp annotate must say which factory makes
        # the kernels (exit 2), not type them wrongly.
        factories = _factory_made(ops_json)
        p = _run(WRP + ["annotate", wrp, "--kernels", case.py, "-o", typed], cwd=work)
        said = p.returncode == 2 and all(f"{f}() runs" in p.stderr for f in factories)
        if said:
            case.routes["annotate + replay"] = ("skip", f"its kernels are made when {', '.join(factories)}() "
                                                "runs; --kernels imports the file without running it (and "
                                                "wrp annotate says so, exit 2)", "")
        else:
            case.verdict("annotate + replay", False, f"exit {p.returncode}: {_first_line(p.stderr)}",
                         WRP + ["annotate", wrp, "--kernels", case.py, "-o", typed])
    elif _wrp(case, "annotate + replay", ["annotate", wrp, "--kernels", case.py, "-o", typed]):
        _replay_route(case, "annotate + replay", typed, [], work / "out_typed.npz", check=False)
    # trace, profile, graph
    if _wrp(case, "trace", ["trace", wrp]):
        case.verdict("trace", True)
    if _wrp(case, "profile", ["profile", wrp, "--repeat", "1"]):
        case.verdict("profile", True)
    if _wrp(case, "graph", ["graph", wrp, "-o", work / "g.html"]):
        g = work / "g.html"
        case.verdict("graph", g.is_file() and g.stat().st_size > 0, "g.html not written",
                     WRP + ["graph", wrp, "-o", g])
    _slice_route(case, ops_json)
    # diff with itself, and with a twin whose one kernel was edited
    cmd = WRP + ["diff", wrp, wrp]
    p = _run(cmd, cwd=work)
    case.verdict("diff self", p.returncode == 0, f"exit {p.returncode}: {_first_line(p.stdout + p.stderr)}", cmd)
    _diff_twin_route(case, ops_json)
    # upgrade --copy-current
    up = work / "up.wrp"
    args = ["upgrade", "--copy-current", "-q", wrp, up]
    if _wrp(case, "upgrade --copy-current", args):
        if not up.is_file():
            case.verdict("upgrade --copy-current", False, "no output written", WRP + args)
        else:
            _replay_route(case, "upgrade --copy-current", up, [], work / "out_up.npz")
    # regress: a suite of this one capture with stock's golden
    suite = work / "suite"
    (suite / "cap_modules").mkdir(parents=True)
    shutil.copy(wrp, suite / "cap.wrp")
    for f in (work / "cap" / "capture_modules").iterdir():
        shutil.copy(f, suite / "cap_modules" / f.name)
    shutil.copy(work / "stock.npz", suite / "cap_expected.npz")
    p = _wrp(case, "regress", ["regress", suite, "--json"])
    if p:
        case.verdict("regress", True)


_NO_OWN_KERNEL = ("the step launches no @wp.kernel of the example's own file (module __main__; "
                  "e.g. warp.fem generates its kernels)")


def _slice_route(case: Case, ops_json: dict) -> None:
    """``wrp slice --ops 0:K`` and ``K:N`` replayed in sequence equal the whole (stock's truth)."""
    route = "slice halves"
    ops = ops_json.get("ops")
    n = len(ops) if isinstance(ops, list) else None
    if n is None:
        case.routes[route] = ("skip", "inspect --ops --json gave no op list", "")
        return
    if n < 2:
        case.routes[route] = ("skip", f"{n} top-level op: nothing to cut", "")
        return
    k = n // 2
    w = case.work
    if not (_wrp(case, route, ["slice", case.wrp, "--ops", f"0:{k}", "-o", w / "s1.wrp"])
            and _wrp(case, route, ["slice", case.wrp, "--ops", f"{k}:{n}", "-o", w / "s2.wrp"])
            and _wrp(case, route, ["replay", w / "s1.wrp", "--output", w / "s1_out.npz"])):
        return
    args = ["replay", w / "s2.wrp", "--inputs", w / "s1_out.npz", "--output", w / "s2_out.npz"]
    if _wrp(case, route, args):
        problem = _compare(case, _load_npz(w / "s2_out.npz"), f"slice 0:{k} then {k}:{n}")
        case.verdict(route, not problem, problem, WRP + args)


def _diff_twin_route(case: Case, ops_json: dict) -> None:
    """Capture a twin whose one kernel (of the example's own file) gained a line; diff names it, exit 1."""
    route = "diff edited twin"
    kernel = _kernel_to_edit(case, ops_json)
    if kernel is None:
        case.routes[route] = ("skip", _NO_OWN_KERNEL, "")
        return
    twin_dir = case.work / "twin"
    twin_dir.mkdir()
    twin_py = twin_dir / case.py.name
    _edited_copy(case, kernel, twin_py)
    # The twin runs from the example's folder (assets, sibling imports) but from the edited text.
    p = _python_child("_capture", twin_py, twin_dir / "cap", case.py.parent, log=twin_dir / "capture.log")
    twin = twin_dir / "cap" / "capture.wrp"
    if not twin.is_file():
        case.verdict(route, False, f"twin capture failed: {_first_line(p.stderr + p.stdout)}",
                     [sys.executable, __file__, "_capture", twin_py, twin_dir / "cap"])
        return
    cmd = WRP + ["diff", case.wrp, twin]
    p = _run(cmd, cwd=case.work)
    text = p.stdout + p.stderr
    if p.returncode != 1:
        case.verdict(route, False, f"exit {p.returncode} (want 1): {_first_line(text)}", cmd)
    elif kernel not in text:
        case.verdict(route, False, f"exit 1 but the edited kernel {kernel!r} is not named: {_first_line(text)}", cmd)
    else:
        case.verdict(route, True, "", cmd)


def main(argv: list) -> int:
    """The command line (see the module's docstring)."""
    if argv[:1] == ["_capture"]:
        if len(argv) > 3:  # the twin: its folder comes first on the import path
            sys.path.insert(0, argv[3])
        meta = child_capture(Path(argv[1]).resolve(), Path(argv[2]).resolve())
        print(json.dumps({"status": meta["status"]}))
        return 0
    if argv[:1] == ["_stock"]:
        print(json.dumps(child_stock(Path(argv[1]), json.loads(argv[3]), Path(argv[2]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="Only this example (e.g. core/example_wave; repeatable; "
                                                    "a name without its folder matches too).")
    ap.add_argument("--jobs", type=int, default=1, help="Examples run side by side (default 1).")
    ap.add_argument("--keep", type=Path, help="Keep every file made here (default: a temporary folder, removed).")
    ap.add_argument("--json", type=Path, help="Write the matrix as JSON here ('-' for stdout).")
    ap.add_argument("--markdown", type=Path, help="Write the matrix as Markdown here (default: "
                                                  "docs/warp-examples.md when every example runs).")
    ap.add_argument("--merge", type=Path, help="An earlier run's --json: its examples not run now are kept "
                                               "(rerun a few with --only, write the whole matrix).")
    ap.add_argument("--list", action="store_true", help="List the examples found and exit.")
    args = ap.parse_args(argv)
    names = discover()
    if args.list:
        print("\n".join(names))
        return 0
    if args.only:
        want = set(args.only)
        names = [n for n in names if n in want or n.split("/")[-1] in want]
        if not names:
            print(f"no example matches {args.only}", file=sys.stderr)
            return 2
    markdown_path = args.markdown or (None if args.only and not args.merge else DEFAULT_MARKDOWN)
    keep = args.keep or Path(tempfile.mkdtemp(prefix="wrp-examples-"))
    keep.mkdir(parents=True, exist_ok=True)

    def one(name):
        case = run_example(name, keep / name.replace("/", "__"))
        case.work.mkdir(parents=True, exist_ok=True)
        (case.work / "case.json").write_text(json.dumps(case.as_json(), indent=1))  # a partial run's record
        bad = [r for r, v in case.routes.items() if v[0] == "FAIL"]
        print(f"{case.name}: {case.status} {case.seconds}s" + (f" FAIL {bad}" if bad else "")
              + (f" ({case.reason[:150]})" if case.status != "ran" else ""), file=sys.stderr, flush=True)
        return case

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        cases = list(pool.map(one, names))
    if args.merge:
        earlier = {r["example"]: Case.from_json(r) for r in json.loads(args.merge.read_text())["examples"]}
        earlier.update({c.name: c for c in cases})
        cases = [earlier[n] for n in sorted(earlier)]
    from importlib.metadata import version  # noqa: PLC0415

    warp_version = version("warp-lang")
    result = {"warp": warp_version, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "routes": list(ROUTES), "examples": [c.as_json() for c in cases]}
    text = json.dumps(result, indent=1)
    if args.json and str(args.json) == "-":
        print(text)
    elif args.json:
        args.json.write_text(text)
    if markdown_path:
        markdown_path.write_text(markdown(cases, warp_version, argv))
    if not args.keep:
        shutil.rmtree(keep, ignore_errors=True)
    failed = any(v[0] == "FAIL" for c in cases if c.status == "ran" for v in c.routes.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))