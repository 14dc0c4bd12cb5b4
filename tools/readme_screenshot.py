"""Regenerate the README's picture of a capture: docs/graph.png.

Captures a sample (``samples/while_loop.py`` by default) with ``wrpkit.capture`` with stock Warp, draws it with
``wrp graph`` (the HTML view) and takes a screenshot in Chromium through
Playwright, after clicking one kernel launch so that the details panel shows.

Usage: python tools/readme_screenshot.py [--sample particles] [--out docs/graph.png]
       [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def capture_sample(name: str, out_dir: Path) -> Path:
    """Capture a sample's step with ``wrpkit.capture`` (so the file records argument access)."""
    import importlib.util  # noqa: PLC0415

    import warp as wp  # noqa: PLC0415

    import wrpkit  # noqa: PLC0415

    wp.config.quiet = True
    sys.path.insert(0, str(ROOT / "samples"))
    spec = importlib.util.spec_from_file_location(f"sample_{name}", ROOT / "samples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    arrays = mod.make_arrays()
    with wrpkit.capture(device="cpu") as rec:
        mod.step(arrays)
    return rec.save(out_dir / f"{name}.wrp", inputs={n: arrays[n] for n in mod.INPUTS},
                    outputs={n: arrays[n] for n in mod.OUTPUTS})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", default="while_loop")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "graph.png")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--click", default="", help="kernel whose launch to click (default: the first launch)")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as d:
        wrp = capture_sample(a.sample, Path(d))
        html = Path(d) / f"{a.sample}.html"
        subprocess.run([sys.executable, "-m", "wrpkit.cli", "graph", str(wrp), "-o", str(html)], check=True)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
            page = b.new_page(viewport={"width": 1480, "height": 420}, device_scale_factor=1)
            page.goto(html.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']")
            sel = "#graph g.node[data-kind='KERNEL_LAUNCH'] rect"
            nodes = page.query_selector_all(sel)
            target = nodes[0] if nodes else None
            if a.click:
                for n in page.query_selector_all("#graph g.node[data-kind='KERNEL_LAUNCH']"):
                    if a.click in n.inner_text():
                        target = n.query_selector("rect")
                        break
            if target is not None:
                target.click()
            a.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(a.out), full_page=False)
            b.close()
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
