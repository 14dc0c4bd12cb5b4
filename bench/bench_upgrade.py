"""Benchmark: `wrp upgrade` of a format-16 capture against `cp` of the same files.

Makes (or reuses) the 10,000-launch, 256 MiB capture of bench_inspect.py,
rewrites it as Warp 1.18.0 would have written it (format 16: no producer
version, no module extras, 20-byte pointer locations) with wrpkit's own
encoder, then times in fresh processes, best of ``--runs``:

* ``cp -r`` of the format-16 ``.wrp`` and its ``_modules/`` folder;
* ``wrp upgrade`` of it to a new format-18 ``.wrp`` (validated, module digests
  recorded, written atomically).

Target (issue #15): upgrade at least 0.5x the speed of cp (the data is copied once).

Usage: python bench/bench_upgrade.py [--dir DIR] [--launches N] [--region-mib M] [--runs R]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def make_format16(src: Path, dst: Path) -> Path:
    from wrpkit.fileio import map_file, publish_wrp, modules_dir_for
    from wrpkit.formats import wrp1
    from wrpkit import model as m

    if dst.exists():
        return dst
    with map_file(src, "capture") as mf:
        prog = wrp1.decode_wrp1(mf.buffer, share_ops=True)
        prog.format_version = 16
        prog.warp_version = ""
        prog.annotations = b""
        prog.modules = [m.Module(x.module_hash, x.module_name, x.binary_filename, x.target_arch) for x in prog.modules]
        mods = {p.name: p.read_bytes() for p in modules_dir_for(src).iterdir()}
        publish_wrp(dst, wrp1.iter_wrp1_chunks(prog), mods)
    return dst


def _drop(paths):
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def main() -> int:
    from bench_inspect import make_capture

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/wrp-bench"))
    ap.add_argument("--launches", type=int, default=10000)
    ap.add_argument("--region-mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    big = make_capture(a.dir, a.launches, a.region_mib)
    old = make_format16(big, a.dir / f"big16_{a.launches}_{a.region_mib}.wrp")
    mods = old.with_name(old.stem + "_modules")
    size = old.stat().st_size + sum(p.stat().st_size for p in mods.iterdir())
    cp_out, up_out = a.dir / "cp_out", a.dir / "up_out"
    cp_t, up_t = [], []
    wrp = [sys.executable, "-m", "wrpkit.cli", "upgrade", "-q"]
    for _ in range(a.runs):
        _drop([cp_out])
        cp_out.mkdir()
        t = time.perf_counter()
        subprocess.run(["cp", "-r", str(old), str(mods), str(cp_out)], check=True)
        cp_t.append(time.perf_counter() - t)
        _drop([up_out])
        up_out.mkdir()
        t = time.perf_counter()
        subprocess.run(wrp + [str(old), str(up_out / "new.wrp")], check=True, cwd=ROOT)
        up_t.append(time.perf_counter() - t)
    cp_b, up_b = min(cp_t), min(up_t)
    print(f"capture: {old} ({size / 2**20:.1f} MiB with modules, format 16)")
    print(f"cp -r:        {cp_b * 1000:8.1f} ms  ({size / 2**20 / cp_b:7.0f} MiB/s)")
    print(f"wrp upgrade:  {up_b * 1000:8.1f} ms  ({size / 2**20 / up_b:7.0f} MiB/s)")
    print(f"upgrade speed vs cp: {cp_b / up_b:.2f}x (target >= 0.5x)")
    _drop([cp_out, up_out])
    return 0


if __name__ == "__main__":
    sys.exit(main())
