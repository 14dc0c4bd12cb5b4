"""Regenerate docs/profile.png (`wrp graph --profile` of a step with a WHILE loop with IF bodies) and
docs/profile-devtools.png (its `-o` file in Chromium's DevTools Performance panel).

Captures a step of ``tests/profile_programs.py``'s kernels with stock Warp (through
``wrpkit.capture``): k_light, k_vec, a WHILE whose body counts down and branches on
an IF (then k_heavy, else k_vec), k_heavy, k_light, with loop counts chosen so that
the shares spread over the heat classes.  Profiles it with ``wrp profile --clock cpu
-o`` (steady shares on a shared machine), draws it with ``wrp graph --profile`` and
takes a screenshot in Chromium through Playwright, after clicking a launch in the IF
so that the details panel shows its time.  Then loads the same ``-o`` file in
Chromium's DevTools Performance panel (``tests/devtools_trace.py``) and pictures it with
every track expanded.

Usage: python tools/profile_screenshot.py [--out docs/profile.png] [--devtools-out docs/profile-devtools.png]
                                          [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def capture_step(pp, path: Path) -> Path:
    """The pictured step (see the module docstring), saved to ``path``."""
    import warp as wp  # noqa: PLC0415

    import wrpkit  # noqa: PLC0415

    a, counter, flag, launch = pp.loop_state()

    def body():
        wp.launch(pp.k_count_down, dim=1, inputs=[counter, flag], device="cpu")
        wp.capture_if(flag, on_true=lambda: launch(pp.k_heavy, a["y"], a["z"], 1500),
                      on_false=lambda: launch(pp.k_vec, a["pts"], a["d"], 300))

    with wrpkit.capture(device="cpu") as rec:
        launch(pp.k_light, a["x"], a["y"])
        launch(pp.k_vec, a["pts"], a["d"], 800)
        wp.capture_while(counter, body)
        launch(pp.k_heavy, a["z"], a["y"], 400)
        launch(pp.k_light, a["y"], a["z"])
    return rec.save(path, inputs={"x": a["x"], "counter": counter}, outputs={"y": a["y"], "z": a["z"]})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "profile.png")
    ap.add_argument("--devtools-out", type=Path, default=ROOT / "docs" / "profile-devtools.png")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    import warp as wp  # noqa: PLC0415

    wp.config.quiet = True
    import profile_programs as pp  # noqa: PLC0415
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as d:
        wrp = capture_step(pp, Path(d) / "while_if.wrp")
        prof, html = Path(d) / "while_if.profile.json", Path(d) / "while_if.html"
        wrp_cli = [sys.executable, "-m", "wrpkit.cli"]
        subprocess.run(wrp_cli + ["profile", str(wrp), "--repeat", "5", "--clock", "cpu", "-o", str(prof)], check=True)
        subprocess.run(wrp_cli + ["graph", str(wrp), "--profile", str(prof), "-o", str(html)], check=True)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
            page = b.new_page(viewport={"width": 1240, "height": 540}, device_scale_factor=1)
            page.goto(html.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']")
            page.click("#graph g.node[data-id='o2.1.0'] rect")
            a.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(a.out))
            b.close()
        from devtools_trace import load_in_devtools  # noqa: PLC0415

        drawn = load_in_devtools(prof, screenshot=a.devtools_out, chromium=a.chromium)
    print(f"wrote {a.out} and {a.devtools_out} ({len(drawn['entries'])} events drawn by DevTools)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
