"""What checking a signature costs: each route with ``--trusted-key`` against the same route unsigned.

For a stock capture holding one initialised float32 array of each size (256 MiB and 1 GiB by
default, made as ``bench_scale.py`` makes them), bundled with ``wrp convert`` and both signed with
``wrp sign``: wall seconds and peak memory (summed over the process tree) of ``wrp-replay``,
``wrp replay`` (both engines), ``wrp validate`` and ``wrpkit.load().run()`` on the ``.wrp`` and the
``.wrpk``, each once unsigned and once with ``--trusted-key`` (``trusted_keys=``), interleaved,
``--reps`` times; the table gives medians and the ratio signed / unsigned.

A ``.wrp`` has no digest to reuse, so its check is one SHA-256 pass over the file and its module
files; a ``.wrpk``'s blob checksums are skipped once the signature's digest of the whole file
matches, so a signed bundle costs one pass, as an unsigned one does.

Usage::

    python bench/bench_signing.py [--sizes 256,1024] [--reps 3] [--dir /tmp/wrpkit-signing]

Nothing here asserts on timings; the tests never time anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from as_installed import cache_bytecode  # noqa: E402
from bench_scale import PY, _exe, make_capture, measure  # noqa: E402

LOAD_RUN = r"""
import sys, wrpkit
keys = sys.argv[2:] or None
wrpkit.load(sys.argv[1], trusted_keys=keys).run()
"""


def rows(wrp: Path, wrpk: Path, pub: Path) -> list:
    """``[(label, unsigned command, signed command)]``."""
    native, cli = _exe("wrp-replay"), _exe("wrp")
    out = []
    for f in (wrp, wrpk):
        ext = f.suffix
        out += [
            (f"wrp-replay big{ext}", [native, str(f)], [native, str(f), "--trusted-key", str(pub)]),
            (f"wrp replay big{ext} --engine native", [cli, "replay", str(f), "--engine", "native"],
             [cli, "replay", str(f), "--engine", "native", "--trusted-key", str(pub)]),
            (f"wrp replay big{ext} (python)", [cli, "replay", str(f), "--engine", "python"],
             [cli, "replay", str(f), "--engine", "python", "--trusted-key", str(pub)]),
            (f"wrpkit.load(big{ext}).run()", [PY, "-c", LOAD_RUN, str(f)], [PY, "-c", LOAD_RUN, str(f), str(pub)]),
            (f"wrp validate big{ext}", [cli, "validate", str(f)], [cli, "validate", str(f), "--trusted-key", str(pub)]),
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,1024", help="capture sizes in MiB, comma-separated")
    ap.add_argument("--reps", type=int, default=3, help="runs of each command (interleaved); medians are shown")
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary one, removed after)")
    args = ap.parse_args()
    cache_bytecode()
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="wrpkit-signing-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("WRPKIT_TRUSTED_KEYS", None)
    key, pub = work / "key.pem", work / "pub.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)], check=True)
    subprocess.run(["openssl", "ec", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True)
    try:
        for mib in [int(s) for s in args.sizes.split(",")]:
            d = work / f"{mib}"
            d.mkdir(exist_ok=True)
            # Each in a folder of its own: big.wrp and big.wrpk would share big.sig.
            (d / "bundle").mkdir(exist_ok=True)
            wrp, wrpk = d / "big.wrp", d / "bundle" / "big.wrpk"
            if not wrp.exists():
                make_capture(wrp, mib)
            if not wrpk.exists():
                subprocess.run([_exe("wrp"), "convert", str(wrp), str(wrpk), "-q"], check=True)
            for f in (wrp, wrpk):
                subprocess.run([_exe("wrp"), "sign", str(f), "--key", str(key)], check=True, capture_output=True)
            table = rows(wrp, wrpk, pub)
            times = {label: ([], [], [], []) for label, _, _ in table}
            for _ in range(args.reps):
                for label, plain, signed in table:
                    t, m = measure(plain, env)
                    ts, ms = measure(signed, env)
                    for lst, v in zip(times[label], (t, m, ts, ms)):
                        lst.append(v)
            print(f"\n{mib} MiB capture, {args.reps} run(s) each, medians "
                  f"(wall s unsigned -> signed = ratio; peak memory MiB unsigned -> signed)")
            for label, _, _ in table:
                t, m, ts, ms = (statistics.median(v) for v in times[label])
                print(f"  {label:40s} {t:7.3f} -> {ts:7.3f} s = {ts / t:5.2f}x   "
                      f"{m / 2**20:7.0f} -> {ms / 2**20:7.0f} MiB")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
