"""The matrix ``tools/warp_examples_compat.py`` writes: its routes (columns, :data:`ROUTES`) and its
Markdown (``docs/warp-examples.md``)."""

from __future__ import annotations

import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Every route, in the matrix's column order.
ROUTES = ("inspect", "inspect --ops --json", "validate", "check", "convert .wrpk round trip",
          "convert .json round trip", "replay python", "replay native", "wrp-replay .wrp",
          "wrp-replay .wrpk", "annotate + replay", "trace", "profile", "graph", "slice halves",
          "diff self", "diff edited twin", "upgrade --copy-current", "regress")


def markdown(cases: list, warp_version: str, argv: list) -> str:
    """The matrix as Markdown: example x route, pass / FAIL (reason) / skip (reason)."""
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    ran = [c for c in cases if c.status == "ran"]
    fails = [(c, r, v) for c in ran for r, v in c.routes.items() if v[0] == "FAIL"]
    abbrev = {r: f"R{i + 1}" for i, r in enumerate(ROUTES)}
    out = [
        "# Warp's own examples against wrpkit",
        "",
        f"Run on {today} with `warp-lang` {warp_version}, on the CPU "
        f"(`{' '.join(['tools/warp_examples_compat.py', *argv])}`).",
        "",
        "Every `example_*.py` the wheel ships in `warp/examples/` is built on the CPU with small options,",
        "one `Example.step()` (or `render()`) is captured with stock `wp.capture_begin(device=\"cpu\", apic=True)`",
        "and saved with `wp.capture_save(..., inputs=STATE, outputs=STATE)`, where STATE is every CPU",
        "`wp.array` attribute of the `Example` object (and of its list items and object attributes, one",
        "level down); a script without an `Example` class has its first launch of one of its own kernels",
        "captured, with that launch's arrays as STATE. Stock Warp's replay (`wp.capture_load` +",
        "`wp.capture_launch`) in a fresh process is the truth, and every wrpkit route is run on the file",
        "and compared with it bit for bit. See the docstring of",
        "[`tools/warp_examples_compat.py`](../tools/warp_examples_compat.py) for the rules.",
        "",
        "Rerun (about an hour on 2 idle cores; `--keep DIR` keeps every file, `--only NAME` runs one",
        "example, and with `--merge OLD.json` rewrites this page with that example's new row):",
        "",
        "```sh",
        ".venv/bin/python tools/warp_examples_compat.py --jobs 2 --json warp-examples.json",
        ".venv/bin/python tools/warp_examples_compat.py --only core/example_wave --merge warp-examples.json",
        "WRPKIT_WARP_EXAMPLES=1 .venv/bin/pytest -q tests/compat/test_warp_examples.py   # the same, as a test",
        "```",
        "",
        f"**{len(cases)} examples**: {len(ran)} captured and replayed by stock Warp, "
        f"{len(cases) - len(ran)} skipped; {len(fails)} failing route(s).",
        "",
        "Routes: " + ", ".join(f"{abbrev[r]} `{r}`" for r in ROUTES) + ".",
        "",
        "## Examples stock Warp captures and replays",
        "",
        "| example | " + " | ".join(abbrev[r] for r in ROUTES) + " |",
        "|---|" + "---|" * len(ROUTES),
    ]
    for c in ran:
        cells = []
        for r in ROUTES:
            v = c.routes.get(r, ("skip", "not run", ""))
            cells.append({"pass": "pass", "FAIL": "**FAIL**", "skip": "skip"}[v[0]])
        out.append(f"| `{c.name}` | " + " | ".join(cells) + " |")
    if fails:
        out += ["", "## Failures", "", "| example | route | command | first line of the reason |", "|---|---|---|---|"]
        for c, r, v in fails:
            out.append(f"| `{c.name}` | {r} | `{_md(v[2])}` | {_md(v[1])} |")
    skips = [(c, r, v) for c in ran for r, v in c.routes.items() if v[0] == "skip"]
    if skips:
        out += ["", "## Routes skipped on captured examples", "", "| example | route | why |", "|---|---|---|"]
        for c, r, v in skips:
            out.append(f"| `{c.name}` | {r} | {_md(v[1])} |")
    out += ["", "## Skipped examples", "", "| example | why |", "|---|---|"]
    for c in cases:
        if c.status != "ran":
            out.append(f"| `{c.name}` | {_md(c.reason)} |")
    out += ["", "[Front page](../README.md)", ""]
    return "\n".join(out)


def _md(text: str) -> str:
    """``text`` safe in a Markdown table cell."""
    return (text or "").replace("|", "\\|").replace("\n", " ").replace(str(ROOT) + "/", "")[:400]
