"""Regenerate docs/profile.png: `wrp graph --profile` of a WHILE loop with IF bodies.

Captures ``tests/profile_programs.py``'s ``capture_while_if`` with stock Warp
(through ``wrpkit.capture``), profiles it with ``wrp profile -o``, draws it with
``wrp graph --profile`` and takes a screenshot in Chromium through Playwright,
after clicking the hottest kernel launch so that the details panel shows its time.

Usage: python tools/profile_screenshot.py [--out docs/profile.png] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "profile.png")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    import warp as wp  # noqa: PLC0415

    wp.config.quiet = True
    import profile_programs as pp  # noqa: PLC0415
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as d:
        wrp = pp.capture_while_if(Path(d) / "while_if.wrp")
        prof, html = Path(d) / "while_if.profile.json", Path(d) / "while_if.html"
        wrp_cli = [sys.executable, "-m", "wrpkit.cli"]
        subprocess.run(wrp_cli + ["profile", str(wrp), "--repeat", "5", "-o", str(prof)], check=True)
        subprocess.run(wrp_cli + ["graph", str(wrp), "--profile", str(prof), "-o", str(html)], check=True)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
            page = b.new_page(viewport={"width": 1240, "height": 470}, device_scale_factor=1)
            page.goto(html.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']")
            page.click("#graph g.node[data-id='o1.1.0'] rect")
            a.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(a.out))
            b.close()
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
