#!/usr/bin/env python3
"""Make the legacy WRP1 fixtures under ``tests/fixtures/legacy/<release>/``.

For each Warp release (1.13.0 .. 1.18.0 by default) this script

1. makes a venv with ``warp-lang==<release> numpy`` (in a temp dir, or reused
   from ``--venv-cache DIR/<release>``);
2. runs ``tools/legacy_programs.py capture`` with that venv's interpreter: each
   case is captured on ``cpu`` with ``apic=True`` and saved with the release's
   own ``wp.capture_save`` (``<case>.wrp`` + ``<case>_modules/``), with its
   kernel module file(s) and ``<case>_inputs.npz``;
3. replays every case in a fresh process of the same release
   (``legacy_programs.py replay``: ``capture_load`` + ``set_param`` + one
   ``capture_launch`` + ``get_param``) and writes ``<case>_expected.npz``;
4. writes ``manifest.json`` and replaces ``<out>/<release>/`` with the result.

The set ``format13`` (``<out>/format13/``) is made the same way with Warp 1.15.0
and a few cases (one of them ``bsr_transpose``), then every saved file is
rewritten to format 13, which no release writes but 1.15 to 1.18 load
(``legacy_programs.py to-format13``); 1.15.0 replays each rewritten file in a
fresh process, and those outputs become ``<case>_expected.npz`` only if they
equal the format-14 replay's bit for bit (``legacy_programs.py compare``).

Each step uses its own empty Warp kernel cache, so nothing comes from
``~/.cache/warp``. CPU kernels are compiled for a generic x86-64 target
(``wp.config.cpu_compiler_flags = ""``) so the committed objects do not depend on
the ISA extensions of the machine that made them.

Usage::

    python tools/make_legacy_fixtures.py                       # all releases and format13
    python tools/make_legacy_fixtures.py --set format13 --venv-cache ~/.cache/wrp-legacy-venvs
    python tools/make_legacy_fixtures.py --release 1.14.0 --venv-cache ~/.cache/wrp-legacy-venvs
    python tools/make_legacy_fixtures.py --out /tmp/legacy --release 1.18.0
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RELEASES = ["1.13.0", "1.14.0", "1.15.0", "1.16.0", "1.17.0", "1.18.0"]
#: Fixture sets in a format no release wrote: folder -> (release that captures, loads and replays
#: them, cases, format the saved files are rewritten to).
DERIVED = {
    "format13": ("1.15.0", ["saxpy", "struct", "capture_if", "capture_while", "backward", "bsr_transpose"], 13),
}
TARGETS = RELEASES + list(DERIVED)
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROGRAMS = HERE / "legacy_programs.py"
DEFAULT_OUT = REPO / "tests" / "fixtures" / "legacy"


def log(msg: str) -> None:
    print(f"[make_legacy_fixtures] {msg}", flush=True)


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def installed_version(py: Path) -> str | None:
    r = subprocess.run(
        [str(py), "-c", "import importlib.metadata as m; print(m.version('warp-lang'))"],
        capture_output=True,
        text=True,
    )
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_venv(venv: Path, release: str, python: str) -> Path:
    """A venv at ``venv`` holding ``warp-lang==release`` and numpy; made if missing or wrong."""
    py = venv_python(venv)
    if py.exists() and installed_version(py) == release:
        log(f"{release}: reusing venv {venv}")
        return py
    if venv.exists():
        shutil.rmtree(venv)
    log(f"{release}: creating venv {venv}")
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"warp-lang=={release}", "numpy"],
        check=True,
    )
    got = installed_version(py)
    if got != release:
        raise RuntimeError(f"venv {venv} has warp-lang {got}, wanted {release}")
    return py


def run_program(py: Path, *args: str, env: dict) -> None:
    cmd = [str(py), str(PROGRAMS), *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    out = "\n".join(line for line in (r.stdout + r.stderr).splitlines() if "CUDA driver" not in line)
    if out.strip():
        print(out, flush=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {r.returncode}")


def make_target(target: str, out_root: Path, venv_cache: Path | None, python: str) -> None:
    """Make ``out_root/target``: a release's folder, or a :data:`DERIVED` set."""
    release, wanted, rewrite = DERIVED.get(target, (target, None, None))
    with tempfile.TemporaryDirectory(prefix=f"wrp-legacy-{target}-") as tmp:
        tmp = Path(tmp)
        venv = (venv_cache / release) if venv_cache else tmp / "venv"
        py = ensure_venv(venv, release, python)
        stage = tmp / "out"
        stage.mkdir()
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env["PYTHONHASHSEED"] = "0"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        log(f"{target}: capturing with {release}")
        case_args = [a for case in wanted or [] for a in ("--case", case)]
        run_program(py, "capture", "--out", str(stage), "--kernel-cache", str(tmp / "kcache-capture"), *case_args,
                    env=env)
        work = json.loads((stage / "_cases.json").read_text())
        if wanted and work["absent"]:
            raise RuntimeError(f"{target}: Warp {release} did not capture " + "; ".join(
                f"{case} ({why})" for case, why in work["absent"].items()))
        cases = work["cases"]

        def replay_all(tag: str) -> None:
            for case in cases:
                # a fresh process (and a fresh, empty kernel cache) per replay
                run_program(
                    py, "replay", "--out", str(stage), "--case", case,
                    "--kernel-cache", str(tmp / f"kcache-{tag}-{case}"), env=env,
                )

        replay_all("replay")
        if rewrite == 13:
            # Rewrite the saved files to format 13, then let the same release load and replay them in
            # fresh processes; their outputs must equal those of the format-14 replays, bit for bit.
            kept = tmp / "format14"
            log(f"{target}: rewriting to format 13; {release} replays the rewritten files")
            run_program(py, "to-format13", "--out", str(stage), "--keep", str(kept), env=env)
            replay_all("replay13")
            run_program(py, "compare", "--out", str(stage), "--against", str(kept), env=env)
        run_program(py, "manifest", "--out", str(stage), env=env)
        shutil.rmtree(stage / "__pycache__", ignore_errors=True)
        dest = out_root / target
        if dest.exists():
            shutil.rmtree(dest)
        out_root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(stage, dest)
        log(f"{target}: wrote {len(cases)} cases to {dest}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Make the legacy WRP1 fixtures with old Warp releases.")
    p.add_argument("--release", "--set", nargs="+", default=TARGETS, choices=TARGETS, metavar="NAME",
                   help=f"release folders and derived sets to make (default: all: {' '.join(TARGETS)})")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture root (default: tests/fixtures/legacy)")
    p.add_argument("--venv-cache", type=Path, help="keep one venv per release in DIR/<release> and reuse it")
    p.add_argument("--python", default=sys.executable, help="interpreter that creates the venvs")
    args = p.parse_args(argv)
    for target in args.release:
        make_target(target, args.out.resolve(), args.venv_cache.resolve() if args.venv_cache else None, args.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
