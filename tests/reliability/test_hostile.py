"""Hostile input: every tool refuses damaged files cleanly or replays a genuinely valid one.

Variants are generated at test time from a real capture (tests/hostile.py):
truncations, bit flips, lying lengths, overlapping sections, hostile nesting,
out-of-range relocations and array descriptors, 2^40-thread launches, libc
kernel symbols, path-traversal module names, missing/empty/corrupted/swapped/
symlinked/FIFO module files, and a FIFO, directory or symlink as the file.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import hostile
from wrpkit.cli import main
from wrpkit.formats.container import open_capture
from wrpkit.errors import WrpError
from wrpkit.checks.validate import validate_capture
from proc_helpers import ROOT, TESTS_DIR


@pytest.fixture(scope="module")
def variants(captures, tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile")
    vs = hostile.generate(captures["views"], out)
    vs.append(hostile.swapped_module_variant(captures["views"], captures["bsr"], out))
    return vs


def accepted_by_library(path) -> bool:
    try:
        with open_capture(path) as cap:
            return not [p for p in validate_capture(cap) if p.severity == "error"]
    except WrpError:
        return False


def test_generator_covers_every_category(variants):
    cats = {v.category for v in variants}
    assert {"truncate", "bitflip", "header", "huge", "sections", "op-size", "nesting", "reloc", "array", "launch",
            "symbols", "module-name", "module-file", "not-a-file", "control"} <= cats
    assert len(variants) > 150


def test_library_refuses_every_damaged_file(variants):
    wrongly_accepted = [v.name for v in variants if v.must_refuse and accepted_by_library(v.path)]
    assert not wrongly_accepted
    assert accepted_by_library(next(v.path for v in variants if v.name == "control"))
    assert accepted_by_library(next(v.path for v in variants if v.name == "module_extra_file_ignored"))


@pytest.mark.parametrize("command", ["inspect", "validate", "check"])
def test_cli_never_crashes_or_prints_a_traceback(variants, command):
    runner = CliRunner()
    for v in variants:
        res = runner.invoke(main, [command, str(v.path)])
        # 2 for a FILE that is no regular file (a FIFO, a directory): a usage error in every command.
        allowed = (0, 1, 2, 3) if v.category == "not-a-file" else (0, 1, 3)
        assert res.exit_code in allowed, (v.name, res.exit_code, res.output)
        assert "Traceback" not in res.output and "internal error" not in res.output, (v.name, res.output)
        assert res.exception is None or isinstance(res.exception, SystemExit), (v.name, repr(res.exception))
        if v.must_refuse and command == "validate":
            assert res.exit_code != 0, v.name


def _run_children(variants, tmp_path):
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    regular = [v for v in variants if v.category != "not-a-file" or v.name == "wrp_directory"]
    listing = tmp_path / "variants.txt"
    listing.write_text("\n".join(str(v.path) for v in regular))
    root = ROOT
    proc = subprocess.run([sys.executable, str(TESTS_DIR / "hostile_runner.py"), str(listing)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(root)})
    return regular, proc


@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_load_run_and_replay_refuse_cleanly_or_replay_valid_files(variants, tmp_path):
    regular, proc = _run_children(variants, tmp_path)
    lines = proc.stdout.splitlines()
    started = [ln.split(" ", 1)[1] for ln in lines if ln.startswith("START ")]
    assert proc.returncode == 0, f"runner died (rc {proc.returncode}) on {started[-1] if started else '?'}: " \
                                 f"{proc.stderr[-2000:]}"
    load = {ln.split()[1]: ln.split()[2:] for ln in lines if ln.startswith("LOAD ")}
    cli = {ln.split()[1]: ln.split()[2:] for ln in lines if ln.startswith("CLI ")}
    assert len(load) == len(cli) == len(regular)
    for v in regular:
        verdict = load[str(v.path)]
        assert verdict[0] != "unexpected", (v.name, verdict)
        if v.must_refuse:
            assert verdict[0] == "refuse", (v.name, verdict)
        code, state = cli[str(v.path)]
        assert state == "clean", (v.name, code, state)
        if v.must_refuse:
            assert code != "0", v.name
    assert load[str(next(v.path for v in regular if v.name == "control"))][0] == "accept"
