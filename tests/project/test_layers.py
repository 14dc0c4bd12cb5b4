"""The package's folders are its layers: each imports only from its own level or below."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from proc_helpers import ROOT

PKG = ROOT / "wrpkit"
# Lowest first.  The package root (model, ops, errors, file access, environment) is level 0;
# wrpkit/__init__.py is the public API and wrpkit/__main__.py the `wrp` entry point: both may name
# any layer (lazily).
LEVELS = {"": 0, "formats": 1, "checks": 2, "run": 3, "debug": 4, "cli": 5}


def _layer_of_module(dotted: str) -> str:
    parts = dotted.split(".")
    assert parts[0] == "wrpkit", dotted
    return parts[1] if len(parts) > 1 and parts[1] in LEVELS else ""


def _imports(path: Path, pkg: Path = PKG):
    """Every wrpkit module ``path`` imports, absolute, with the line it is on."""
    package = list(path.relative_to(pkg.parent).parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [f"{mod}.{a.name}" for a in node.names] if not node.module else [mod]
            else:
                names = [node.module or ""]
            for n in names:
                if n.startswith("wrpkit"):
                    yield n, node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("wrpkit"):
                    yield a.name, node.lineno


def _sources(pkg: Path = PKG):
    return [p for p in pkg.rglob("*.py") if "fbs" not in p.parts and p not in (pkg / "__init__.py", pkg / "__main__.py")]


def _upward_imports(pkg: Path = PKG) -> list:
    bad = []
    for path in _sources(pkg):
        folder = path.parent.relative_to(pkg).parts
        own = LEVELS[folder[0] if folder else ""]
        for mod, line in _imports(path, pkg):
            if LEVELS[_layer_of_module(mod)] > own:
                bad.append(f"{path.relative_to(pkg.parent)}:{line} imports {mod}")
    return bad


def test_every_module_sits_in_a_known_layer():
    for path in _sources():
        folder = path.parent.relative_to(PKG).parts
        assert not folder or folder[0] in LEVELS, f"{path} is in no layer folder"


def test_no_import_runs_up_the_layers():
    bad = _upward_imports()
    assert not bad, "imports that run up the layers:\n" + "\n".join(bad)


def test_the_layer_check_finds_an_upward_import(tmp_path):
    # A check that can never fail proves nothing: give it a tree with one bad import.
    pkg = tmp_path / "wrpkit"
    (pkg / "formats").mkdir(parents=True)
    (pkg / "run").mkdir()
    (pkg / "formats" / "bad.py").write_text("from ..model import Program\nfrom ..run import runtime\n")
    (pkg / "run" / "ok.py").write_text("from ..formats import wrp1\nimport wrpkit.model\n")
    assert _upward_imports(pkg) == ["wrpkit/formats/bad.py:2 imports wrpkit.run"]


def _module_name(path: Path, pkg: Path) -> str:
    parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, pkg: Path = PKG):
    """What :func:`_imports` yields, and for ``from package import name`` also ``package.name``
    (a submodule when there is one: ``from .run import regress`` imports ``run.regress``)."""
    for imported, _ in _imports(path, pkg):
        yield imported
    package = list(path.relative_to(pkg.parent).parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + [node.module])
            if mod.startswith("wrpkit"):
                yield from (f"{mod}.{a.name}" for a in node.names)


def _import_cycles(pkg: Path = PKG) -> list:
    """Every import cycle among ``pkg``'s modules: the strongly connected components of more than one
    module (Tarjan) of the static import graph, lazy imports inside functions included."""
    modules = {_module_name(p, pkg): p for p in _sources(pkg)}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imported_modules(path, pkg):
            while imported and imported not in modules:  # ``from .x import f`` names x.f: x is the module
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = sorted(targets)
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(cycles)


def test_no_import_cycle():
    # A cycle inside one layer passes the direction check; it is still two modules that cannot be
    # understood, tested or moved apart.  Lazy imports count: they are cycles all the same.
    cycles = _import_cycles()
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle(tmp_path):
    # Inside one layer, through a lazy import, through ``from . import``, and three modules long.
    pkg = tmp_path / "wrpkit"
    (pkg / "run").mkdir(parents=True)
    (pkg / "run" / "__init__.py").write_text("")
    (pkg / "run" / "a.py").write_text("from .b import f\n")
    (pkg / "run" / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "run" / "c.py").write_text("from .a import g\n")
    (pkg / "x.py").write_text("from .run import d\n")
    (pkg / "run" / "d.py").write_text("from ..y import z\n")
    (pkg / "y.py").write_text("import wrpkit.x\n")
    assert _import_cycles(pkg) == [["wrpkit.run.a", "wrpkit.run.b"], ["wrpkit.run.d", "wrpkit.x", "wrpkit.y"]]


def test_public_api_is_unchanged():
    import wrpkit  # noqa: PLC0415

    for name in ("load", "capture", "save", "open_capture", "Program", "Recording", "WrpError", "WrpFormatError",
                 "WrpValidationError", "WrpRuntimeError"):
        assert getattr(wrpkit, name) is not None


def _warp_imports(folders=("formats", "checks"), pkg: Path = PKG) -> list:
    """``path:line imports warp...`` for every Warp import, at any depth, in ``folders``."""
    bad = []
    for folder in folders:
        for path in sorted((pkg / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                else:
                    continue
                for name in names:
                    if name == "warp" or name.startswith("warp."):
                        bad.append(f"{path.relative_to(pkg.parent)}:{node.lineno} imports {name}")
    return bad


# A user's program the layer rule was not written around: a vector type, a
# @wp.func helper, a struct argument and an unbound scratch array.  Captured
# in its own process with stock Warp, then read without Warp.
_CAPTURE = r"""
import sys
import numpy as np
import warp as wp

wp.config.log_level = wp.LOG_WARNING


@wp.struct
class Params:
    gain: float
    bias: wp.vec3


@wp.func
def shade(v: wp.vec3, p: Params) -> wp.vec3:
    return v * p.gain + p.bias


@wp.kernel
def k_shade(src: wp.array(dtype=wp.vec3), scratch: wp.array(dtype=wp.vec3), dst: wp.array(dtype=float), p: Params):
    i = wp.tid()
    scratch[i] = shade(src[i], p)
    dst[i] = wp.length(scratch[i])


src = wp.array(np.arange(24, dtype=np.float32).reshape(8, 3), dtype=wp.vec3, device="cpu")
scratch = wp.zeros(8, dtype=wp.vec3, device="cpu")
dst = wp.zeros(8, dtype=float, device="cpu")
p = Params()
p.gain, p.bias = 2.0, wp.vec3(1.0, 0.0, -1.0)
wp.capture_begin(device="cpu", apic=True)
try:
    wp.launch(k_shade, dim=8, inputs=[src, scratch, dst, p], device="cpu")
finally:
    graph = wp.capture_end(device="cpu")
wp.capture_save(graph, sys.argv[1], inputs={"src": src}, outputs={"dst": dst})
"""

_WITHOUT_WARP = r"""
import importlib, sys
from pathlib import Path
sys.modules["warp"] = None  # `import warp` now raises ImportError, anywhere
pkg = Path(sys.argv[1])
names = []
for folder in ("formats", "checks"):
    for path in sorted((pkg / folder).rglob("*.py")):
        rel = path.relative_to(pkg.parent).with_suffix("")
        names.append(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
for name in names:
    importlib.import_module(name)
from wrpkit.checks.check import preflight
from wrpkit.checks.validate import validate_capture
from wrpkit.formats.container import open_capture
from wrpkit.formats.convert import convert
src, out = Path(sys.argv[2]), Path(sys.argv[3])
cap = open_capture(src)
problems = validate_capture(cap)
assert not [p for p in problems if p.severity == "error"], problems
convert(src, out / "c.wrpk")
convert(out / "c.wrpk", out / "c.json")
convert(out / "c.json", out / "back.wrp")
assert open_capture(out / "back.wrp").program == cap.program
findings = preflight(cap, "cpu")  # `wrp check` without Warp: findings, no crash
print(len(names), "modules,", sum(1 for op in cap.program.ops if op.op_type == 1), "launch")
print({f.check: f.status for f in findings})
"""


@pytest.mark.slow  # a capture and a Warp-less process: 3 s on two cores; the full suite runs it
def test_formats_and_checks_never_import_warp(tmp_path):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    bad = _warp_imports()
    assert not bad, "Warp imports below run/ (ask through wrpkit/run/):\n" + "\n".join(bad)
    # The static check can fail: a planted import inside a function is found.
    (tmp_path / "wrpkit" / "checks").mkdir(parents=True)
    (tmp_path / "wrpkit" / "checks" / "bad.py").write_text("def f():\n    from warp._src import context\n")
    assert _warp_imports(("checks",), tmp_path / "wrpkit") == ["wrpkit/checks/bad.py:2 imports warp._src"]

    # And dynamically: every formats/ and checks/ module imports, and a real
    # capture opens, validates, converts through every form and is checked,
    # in a process where Warp cannot be imported.
    wrp, script = tmp_path / "shade.wrp", tmp_path / "shade.py"  # Warp reads kernel source from a file
    script.write_text(_CAPTURE)
    made = subprocess.run([sys.executable, str(script), str(wrp)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0 and wrp.exists(), made.stderr
    res = subprocess.run([sys.executable, "-c", _WITHOUT_WARP, str(PKG), str(wrp), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "modules, 1 launch" in res.stdout, res.stdout


def _run_layout(pkg: Path = PKG) -> list:
    """What is wrong with ``run/``'s layout: a module in ``run/`` itself (every one belongs to a
    package of one concern), or a package or module of it that docs/architecture.md does not name."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    run = pkg / "run"
    bad = [f"run/{p.name}: a module in run/ itself (put it in the package of its concern)"
           for p in sorted(run.glob("*.py")) if p.name != "__init__.py"]
    for sub in sorted(p for p in run.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if f"`run/{sub.name}/`" not in doc:
            bad.append(f"run/{sub.name}/: not drawn in docs/architecture.md")
        for mod in sorted(sub.glob("*.py")):
            if mod.name != "__init__.py" and f"`{mod.name}`" not in doc:
                bad.append(f"run/{sub.name}/{mod.name}: not named in docs/architecture.md")
    return bad


def test_run_is_split_by_concern_as_the_architecture_page_draws_it():
    assert _run_layout() == []


def test_the_layout_check_finds_a_flat_module_and_an_undrawn_package(tmp_path):
    pkg = tmp_path / "wrpkit"
    (pkg / "run" / "replay").mkdir(parents=True)
    (pkg / "run" / "elsewhere").mkdir()
    (pkg / "run" / "__init__.py").write_text("")
    (pkg / "run" / "loose.py").write_text("")
    (pkg / "run" / "replay" / "engines.py").write_text("")
    (pkg / "run" / "replay" / "unnamed_thing.py").write_text("")
    assert _run_layout(pkg) == ["run/loose.py: a module in run/ itself (put it in the package of its concern)",
                                "run/elsewhere/: not drawn in docs/architecture.md",
                                "run/replay/unnamed_thing.py: not named in docs/architecture.md"]
