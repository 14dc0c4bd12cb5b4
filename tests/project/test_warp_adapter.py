"""Issue 42 item 3: one package imports Warp, and one module of it reads Warp's internals.

``wrpkit/run/`` is the only package that imports Warp; ``wrpkit/run/warp_bridge/internals.py`` is the only
module that names ``warp._src``, and each internal it reads is checked here against the installed
Warp, so that a Warp release that moves one fails this file.  And a CLI parent whose job runs in a
child process never imports Warp at all.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from proc_helpers import ROOT

PKG = ROOT / "wrpkit"
ADAPTER = PKG / "run" / "warp_bridge" / "internals.py"
WARP_PACKAGE = PKG / "run"

_SRC_NAME = re.compile(r"^warp\._src(\.\w+)*$")


def _warp_import_names(node) -> list:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level:
        return [node.module or ""]
    return []


def _warp_problems(pkg: Path = PKG) -> list:
    """``path:line why`` for every Warp import outside ``run/`` and every ``warp._src`` named outside the adapter."""
    bad = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg.parent)
        in_run = path.is_relative_to(pkg / "run")
        is_adapter = path == pkg / "run" / "warp_bridge" / "internals.py"
        for node in ast.walk(ast.parse(path.read_text())):
            for name in _warp_import_names(node):
                if (name == "warp" or name.startswith("warp.")) and not in_run:
                    bad.append(f"{rel}:{node.lineno} imports {name} outside wrpkit/run/")
                if (name.startswith("warp._src") or name == "warp" and isinstance(node, ast.ImportFrom)
                        and any(a.name == "_src" for a in node.names)) and not is_adapter:
                    bad.append(f"{rel}:{node.lineno} imports {name} (warp._src) outside the adapter")
            if is_adapter:
                continue
            if isinstance(node, ast.Attribute) and node.attr == "_src":
                bad.append(f"{rel}:{node.lineno} reads ._src outside the adapter")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value == "_src" or _SRC_NAME.match(node.value)):
                bad.append(f"{rel}:{node.lineno} names {node.value!r} outside the adapter")
    return sorted(bad)


def test_only_run_imports_warp_and_only_the_adapter_reads_its_internals():
    bad = _warp_problems()
    assert not bad, ("Warp is imported outside wrpkit/run/, or its internals read outside "
                     "wrpkit/run/warp_bridge/internals.py:\n" + "\n".join(bad))


def test_the_import_check_finds_what_it_forbids(tmp_path):
    # A check that can never fail proves nothing: plant each kind of violation.
    pkg = tmp_path / "wrpkit"
    for folder in ("debug", "run/warp_bridge", "cli"):
        (pkg / folder).mkdir(parents=True)
    (pkg / "debug" / "a.py").write_text("def f():\n    import warp as wp\n")
    (pkg / "cli" / "b.py").write_text("from warp.types import is_array\n")
    (pkg / "run" / "c.py").write_text("import warp\nfrom warp._src import types\n")
    (pkg / "run" / "d.py").write_text("import warp as wp\nx = wp._src.context\ny = getattr(wp, '_src')\n")
    (pkg / "run" / "e.py").write_text("import importlib\nm = importlib.import_module('warp._src.codegen')\n")
    (pkg / "run" / "f.py").write_text("from warp import _src\n")
    (pkg / "run" / "warp_bridge" / "internals.py").write_text("from warp._src import types\n")  # allowed here only
    assert _warp_problems(pkg) == [
        "wrpkit/cli/b.py:1 imports warp.types outside wrpkit/run/",
        "wrpkit/debug/a.py:2 imports warp outside wrpkit/run/",
        "wrpkit/run/c.py:2 imports warp._src (warp._src) outside the adapter",
        "wrpkit/run/d.py:2 reads ._src outside the adapter",
        "wrpkit/run/d.py:3 names '_src' outside the adapter",
        "wrpkit/run/e.py:2 names 'warp._src.codegen' outside the adapter",
        "wrpkit/run/f.py:1 imports warp (warp._src) outside the adapter",
    ]


# ---------------------------------------------------------------------------------------------
# The adapter's table, against the installed Warp
# ---------------------------------------------------------------------------------------------


def _started_warp():
    from wrpkit.run.warp_bridge.start import init_warp  # noqa: PLC0415

    return init_warp(cpu_only=True)


_KIND_CHECKS = {
    "module": lambda v: isinstance(v, types.ModuleType),
    "function": callable,
    "class": lambda v: isinstance(v, type),
    "dict": lambda v: isinstance(v, dict),
    "optional": lambda v: True,  # present; None until Warp starts
    "runtime": lambda v: True,  # an attribute of the started runtime (None outside a capture)
}


def _internal_problem(module: str, name: str, kind: str):
    """Why ``module.name`` is not a ``kind`` in the installed Warp (Warp must be started), or None."""
    import importlib  # noqa: PLC0415

    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        return f"{module}: cannot be imported ({e})"
    for part in name.split(".") if name else ():
        if not hasattr(obj, part):
            return f"{module}.{name}: has no {part!r}"
        obj = getattr(obj, part)
    if kind not in _KIND_CHECKS:
        return f"{module}.{name}: unknown kind {kind!r}"
    if not _KIND_CHECKS[kind](obj):
        return f"{module}.{name}: is a {type(obj).__name__}, not a {kind}"
    return None


def test_every_internal_the_adapter_reads_is_where_warp_keeps_it():
    from wrpkit.run.warp_bridge.internals import INTERNALS  # noqa: PLC0415

    _started_warp()  # runtime.<attribute> entries exist once Warp has started
    problems = [p for p in (_internal_problem(*entry) for entry in INTERNALS) if p]
    assert not problems, ("Warp moved internals wrpkit reads (update wrpkit/run/warp_bridge/internals.py):\n"
                          + "\n".join(problems))
    # The check fails for a name Warp does not have, or one of another kind.
    assert "has no 'no_such_internal'" in _internal_problem("warp._src.types", "no_such_internal", "function")
    assert "not a dict" in _internal_problem("warp._src.types", "concrete_array_type", "dict")
    assert "cannot be imported" in _internal_problem("warp._src.no_such_module", "", "module")


def _adapter_reads() -> set:
    """Every ``_internal(module, name)`` the adapter's code makes, from its source (literal arguments only)."""
    reads = set()
    for node in ast.walk(ast.parse(ADAPTER.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_internal":
            args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            assert len(args) == len(node.args) and args, f"line {node.lineno}: _internal with a non-literal argument"
            reads.add((args[0], args[1] if len(args) > 1 else ""))
    return reads


def test_the_table_is_what_the_adapter_reads():
    # Derived from the adapter itself: a read missing from INTERNALS (or a stale entry) fails here,
    # and nothing in the adapter imports warp._src by any other way than _internal.
    from wrpkit.run.warp_bridge import internals as wi  # noqa: PLC0415

    assert _adapter_reads() == {(mod, name) for mod, name, _ in wi.INTERNALS}
    assert not [n for n in ast.walk(ast.parse(ADAPTER.read_text())) for name in _warp_import_names(n)
                if name.startswith("warp")], "the adapter reads Warp only through _internal"
    with pytest.raises(LookupError, match="not listed"):
        wi._internal("warp._src.types", "array_t")


def test_the_adapter_gives_what_its_names_say():
    import warp as wp  # noqa: PLC0415

    from wrpkit.run.warp_bridge import internals as wi  # noqa: PLC0415

    _started_warp()
    assert wi.runtime_started()
    assert wi.concrete_array_type(wp.array2d(dtype=float)) is wp.array
    assert wi.concrete_array_type(wp.indexedarray(dtype=float)) is wp.indexedarray
    assert wi.array_descriptor_ctype(wp.array).__name__ == "array_t"
    assert wi.array_descriptor_ctype(float) is None
    assert wi.is_scalar_type(wp.float32) and wi.is_scalar_type(wp.bool) and wi.is_scalar_type(wp.uint64)
    assert not wi.is_scalar_type(wp.vec3f) and not wi.is_scalar_type([])
    assert wi.warp_type_named("vec3f") is wp.vec3f and wi.warp_type_named("float16") is wp.float16
    assert wi.warp_type_named("no_such_type") is None
    assert wi.registered_module("wrpkit_no_such_module") is None
    tag = wi.cpu_target_hash("")
    assert isinstance(tag, str) and re.fullmatch(r"[0-9a-f]{8}", tag), tag
    assert wi.apic_capture() is None  # no capture in progress
    wp.capture_begin(device="cpu", apic=True)
    try:
        assert wi.apic_capture() is not None
    finally:
        wp.capture_end(device="cpu")


# ---------------------------------------------------------------------------------------------
# A CLI parent whose job runs in a child never imports Warp
# ---------------------------------------------------------------------------------------------

_CAPTURE = r"""
import sys
import numpy as np
import warp as wp

wp.config.quiet = True


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float):
    i = wp.tid()
    y[i] = a * x[i] + y[i]


x = wp.array(np.arange(16, dtype=np.float32), device="cpu")
y = wp.zeros(16, dtype=float, device="cpu")
wp.capture_begin(device="cpu", apic=True)
try:
    wp.launch(saxpy, dim=16, inputs=[x, y, 2.0], device="cpu")
finally:
    graph = wp.capture_end(device="cpu")
wp.capture_save(graph, sys.argv[1], inputs={"x": x}, outputs={"y": y})
"""

#: A line of ``-X importtime`` for the top-level ``warp`` package.
_WARP_IMPORTED = re.compile(r"^import time:.*\|\s+warp$", re.MULTILINE)


@pytest.fixture(scope="module")
def stock_capture(tmp_path_factory) -> Path:
    """A one-launch capture made now with stock Warp (kernel source read from a file)."""
    folder = tmp_path_factory.mktemp("adapter")
    script, wrp = folder / "saxpy_capture.py", folder / "saxpy.wrp"
    script.write_text(_CAPTURE)
    made = subprocess.run([sys.executable, str(script), str(wrp)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0 and wrp.exists(), made.stderr
    return wrp


def _parent_imports_warp(args, cwd) -> bool:
    """Run ``wrp ARGS`` under ``-X importtime`` (which its children do not inherit); whether it imported Warp."""
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "wrpkit", *args], capture_output=True,
                         text=True, timeout=300, cwd=cwd)
    assert res.returncode == 0, f"wrp {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr[-3000:]}"
    return bool(_WARP_IMPORTED.search(res.stderr))


def test_the_importtime_probe_sees_warp_where_the_parent_imports_it(stock_capture):
    # `wrp check` asks the installed Warp in its own process: the probe must see it.
    assert _parent_imports_warp(["check", str(stock_capture)], stock_capture.parent)


def test_native_replay_parent_never_imports_warp(stock_capture, replayer):
    assert not _parent_imports_warp(["replay", str(stock_capture), "--engine", "native"], stock_capture.parent)
    assert not _parent_imports_warp(["replay", str(stock_capture)], stock_capture.parent)  # engine auto


def test_contained_trace_parent_never_imports_warp(stock_capture):
    assert not _parent_imports_warp(["trace", str(stock_capture), "--timeout", "60"], stock_capture.parent)
