"""The package's folders are its layers: each imports only from its own level or below."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "wrpkit"
# Lowest first.  The package root (model, errors, fileio, environment) is level 0;
# wrpkit/__init__.py is the public API and may name any layer (lazily).
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
    return [p for p in pkg.rglob("*.py") if "fbs" not in p.parts and p != pkg / "__init__.py"]


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


def test_public_api_is_unchanged():
    import wrpkit  # noqa: PLC0415

    for name in ("load", "capture", "save", "open_capture", "Program", "Recording", "WrpError", "WrpFormatError",
                 "WrpValidationError", "WrpRuntimeError"):
        assert getattr(wrpkit, name) is not None
