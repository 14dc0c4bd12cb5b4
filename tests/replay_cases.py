"""Captures shared by the capture, runtime and replay-CLI tests.

Every capture is made once per test session (memoized here, so two test
modules share it) into one temporary directory removed at exit.  Captures are
real Warp captures on the CPU: the programs of ``tests/programs.py`` and the
scripts of ``samples/``.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

import programs  # tests/programs.py (registry of real Warp programs)
import warp as wp
import wrpkit

ROOT = Path(__file__).resolve().parents[1]
SAMPLES_DIR = ROOT / "samples"

_TMP = Path(tempfile.mkdtemp(prefix="wrpkit-tests-"))
atexit.register(shutil.rmtree, _TMP, True)


def has_cuda() -> bool:
    return wp.get_cuda_device_count() > 0


def tmpdir(name: str) -> Path:
    d = _TMP / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def program_names() -> list:
    return sorted(programs.PROGRAMS)


def fresh_inputs(name: str) -> dict:
    """Numpy copies of a program's input bindings, as ``make_arrays`` makes them."""
    prog = programs.PROGRAMS[name]
    arrays = prog.make_arrays("cpu")
    return {n: arrays[n].numpy().copy() for n in prog.inputs}


@functools.lru_cache(maxsize=None)
def live(name: str) -> dict:
    """One live step of a program: ``{binding: np.ndarray}``."""
    return programs.run_live(programs.PROGRAMS[name], "cpu")


@functools.lru_cache(maxsize=None)
def wrpkit_capture(name: str) -> Path:
    """Capture a program with ``wrpkit.capture`` and save it with typed signatures."""
    prog = programs.PROGRAMS[name]
    arrays = prog.make_arrays("cpu")
    with wrpkit.capture(device="cpu") as rec:
        prog.step(arrays)
    path = rec.save(tmpdir("wrpkit") / name, inputs={n: arrays[n] for n in prog.inputs},
                    outputs={n: arrays[n] for n in prog.outputs})
    return path


@functools.lru_cache(maxsize=None)
def stock_capture(name: str) -> Path:
    """A program captured with stock ``wp.capture_save`` (no wrpkit annotations), from the run's one cache."""
    return programs.cached_capture(name, "cpu")


@functools.lru_cache(maxsize=None)
def expected(name: str) -> dict:
    """What a replay of one step must give: live execution, or stock Warp's replay
    where the program documents that stock replay differs from live."""
    prog = programs.PROGRAMS[name]
    if prog.replay_matches_live:
        return live(name)
    return programs.replay_stock(prog, stock_capture(name), "cpu")


# -- samples -----------------------------------------------------------------


def sample_names() -> list:
    return sorted(p.stem for p in SAMPLES_DIR.glob("*.py") if not p.name.startswith("_"))


@functools.lru_cache(maxsize=None)
def sample_module(name: str):
    spec = importlib.util.spec_from_file_location(f"wrpkit_sample_{name}", SAMPLES_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@functools.lru_cache(maxsize=None)
def sample_capture(name: str) -> tuple:
    """``(wrp, inputs_npz, expected_npz)`` written by the sample's own ``capture``."""
    mod = sample_module(name)
    out = tmpdir(f"sample_{name}")
    wrp = Path(mod.capture(out))
    return wrp, out / f"{mod.NAME}_inputs.npz", out / f"{mod.NAME}_expected.npz"


@functools.lru_cache(maxsize=None)
def sample_live(name: str) -> dict:
    """One live step of a sample, computed here."""
    mod = sample_module(name)
    arrays = mod.make_arrays("cpu")
    mod.step(arrays)
    wp.synchronize_device("cpu")
    names = list(dict.fromkeys(list(mod.INPUTS) + list(mod.OUTPUTS)))
    return {n: arrays[n].numpy().copy() for n in names}


@functools.lru_cache(maxsize=None)
def sample_wrpkit_capture(name: str) -> Path:
    """The sample's step captured with wrpkit (typed signatures)."""
    mod = sample_module(name)
    arrays = mod.make_arrays("cpu")
    with wrpkit.capture(device="cpu") as rec:
        mod.step(arrays)
    return rec.save(tmpdir("sample_wrpkit") / mod.NAME, inputs={n: arrays[n] for n in mod.INPUTS},
                    outputs={n: arrays[n] for n in mod.OUTPUTS})


def sample_inputs(name: str) -> dict:
    mod = sample_module(name)
    arrays = mod.make_arrays("cpu")
    return {n: arrays[n].numpy().copy() for n in mod.INPUTS}


# -- comparison ----------------------------------------------------------------


def same_bytes(a, b) -> bool:
    """Identical shape, dtype and bytes."""
    return programs.same_bytes(np.asarray(a), np.asarray(b))


def same_raw_bytes(a, b) -> bool:
    """Identical bytes, whatever the dtype and shape."""
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def copy_capture(src: Path, dst_dir: Path, stem: str = None) -> Path:
    """Copy a ``.wrp`` and its ``<stem>_modules/`` into ``dst_dir``."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    stem = stem or src.stem
    dst = dst_dir / f"{stem}.wrp"
    shutil.copyfile(src, dst)
    mdir = src.with_name(src.stem + "_modules")
    if mdir.is_dir():
        shutil.copytree(mdir, dst_dir / f"{stem}_modules", dirs_exist_ok=True)
    return dst


def rewrite_capture(src: Path, dst_dir: Path, edit) -> Path:
    """Copy a capture into ``dst_dir``, apply ``edit(program)`` to its model and re-encode it."""
    from wrpkit.formats import wrp1  # noqa: PLC0415

    dst = copy_capture(src, dst_dir)
    prog = wrp1.decode_wrp1(dst.read_bytes())
    edit(prog)
    dst.write_bytes(wrp1.encode_wrp1(prog))
    return dst


def endless_while(prog) -> None:
    """Edit a capture of ``capture_while`` (tests/programs.py) into a valid file whose replay never ends in practice.

    Prepends ``WHILE flag { MEMSET flag = 1; MEMSET counter = 65535; WHILE counter { k_counter_step } }``:
    the outer body writes 1 into its own condition, and the inner loop counts 65535 down and ends, so no
    single loop reaches Warp's 2^24-iteration guard (a loop that did would abort the replay with an error
    at once) and the outer one runs about 2^24 times 65535 kernel launches (days).  Every WHILE body touches its
    condition region, so ``wrp validate`` and ``wrp-replay --list`` accept it.
    """
    from wrpkit import model as m  # noqa: PLC0415

    whiles = [op for op in prog.ops if isinstance(op, m.While)]
    counter, flag = whiles[0].cond_region_id, whiles[1].cond_region_id  # the counted loop, the convergence loop
    step = next(op for _, op in m.walk_ops(prog.ops)
                if isinstance(op, m.KernelLaunch) and "k_counter_step" in op.kernel_key)
    inner = m.While(counter, 0, [step])
    body = [m.Memset(flag, 1, 0, 4), m.Memset(counter, 0xFF, 0, 2), m.Memset(counter, 0, 2, 2), inner]
    prog.ops = [m.While(flag, 0, body)] + list(prog.ops)
