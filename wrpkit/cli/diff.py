"""``wrp diff``: compare two captures structurally; exit 0 identical, 1 different, 2 or more could not compare."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .options import UserPath, kernels_option

from .output import console, dump_json, escape


def _short(v, width: int = 60) -> str:
    """A value on one line: strings (hashes, names) whole and unquoted; long lists cut between items."""
    if isinstance(v, str):
        return v if len(v) <= 2 * width else v[: 2 * width - 3] + "..."
    text = json.dumps(v, default=str)
    if len(text) <= width:
        return text
    if isinstance(v, list):
        shown = []
        for item in v:
            part = json.dumps(item, default=str)
            if len(", ".join(shown + [part])) > width - 20:
                break
            shown.append(part)
        return "[" + ", ".join(shown) + f", ... ({len(v)} items)]"
    if isinstance(v, dict) and "sha256" in v:
        return f"{v.get('length')} bytes sha256 {v['sha256']}"
    return text[: width - 3] + "..."  # a number-only structure: no quote is cut


def _abbrev(h) -> str:
    """A long hash cut to 16 digits, marked as cut (outside any quotes)."""
    return h if not isinstance(h, str) or len(h) <= 20 else h[:16] + "..."


def _array_change(a: dict, b: dict) -> str:
    """What differs between two array descriptors: ``shape (128,) -> (64,)`` (strides too where they differ)."""
    def dims(v):
        return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"

    parts = [f"{k} {dims(a[k])} -> {dims(b[k])}" for k in ("shape", "strides") if a[k] != b[k]]
    return "array " + ("; ".join(parts) if parts else f"ndim {a['ndim']} -> {b['ndim']}")


def _relocation_change(a: list, b: list) -> str:
    """Only the relocations that differ: those of A that B lacks, and of B that A lacks."""
    only_a = [r for r in a if r not in b]
    only_b = [r for r in b if r not in a]
    return f"{len(a)} -> {len(b)}; only in a: {_short(only_a)}; only in b: {_short(only_b)}"


def _field_lines(fields: dict, indent: str) -> list:
    out = []
    for k, v in fields.items():
        if k == "args":
            for a in v:
                name = f"{a['param']} ({a['name']})" if a["name"] else f"{a['param']}"
                if isinstance(a["a"], dict) and "array" in a["a"] and isinstance(a["b"], dict) and "array" in a["b"]:
                    out.append(f"{indent}arg {name}: {_array_change(a['a']['array'], a['b']['array'])}")
                else:
                    out.append(f"{indent}arg {name}: {_short(a['a'])} -> {_short(a['b'])}")
        elif k == "relocations":
            out.append(f"{indent}relocations: {_relocation_change(v['a'], v['b'])}")
        elif isinstance(v, list):  # a nested body
            out.append(f"{indent}{k}:")
            out += _op_lines(v, indent + "  ")
        else:
            out.append(f"{indent}{k}: {_short(v['a'])} -> {_short(v['b'])}")
    return out


def _indices(values: list) -> str:
    """Op positions, all of them when few, else the first two, an ellipsis and the last."""
    return ", ".join(map(str, values)) if len(values) <= 4 else f"{values[0]}, {values[1]}, ..., {values[-1]}"


def _source_text(row: dict) -> str:
    """`` at sim.py:42 in step()``: where the op was issued (in b, else in a), or ""."""
    from ..checks.sources import where_text  # noqa: PLC0415

    src = row.get("source") or {}
    a, b = where_text(src.get("a")), where_text(src.get("b"))
    if a and b and a != b:
        return f" at {a} (a) / {b} (b)"
    return f" at {b or a}" if (a or b) else ""


def _op_lines(rows: list, indent: str = "  ") -> list:
    """One entry per distinct change: the same change repeated (a step launched in a loop) is one
    entry with its count and where it happens."""
    sign = {"added": "+", "removed": "-", "changed": "~"}
    groups: dict = {}
    for r in rows:
        key = (r["change"], r["kind"], r["kernel"] or "", tuple(_field_lines(r["fields"], indent + "    ")),
               _source_text(r))
        groups.setdefault(key, []).append(r)
    out = []
    for (change, kind, kernel, lines, source), same in groups.items():
        ia = [r["a"] for r in same if r["a"] is not None]
        ib = [r["b"] for r in same if r["b"] is not None]
        where = (f"a[{_indices(ia)}]" if ia else "") + (" " if ia and ib else "") + (f"b[{_indices(ib)}]" if ib else "")
        times = f" ({len(same)} times)" if len(same) > 1 else ""
        out.append(f"{indent}{sign[change]} {where} {kind} {kernel}".rstrip() + times + source)
        out += list(lines)
    return out


@click.command("diff")
@click.argument("a", type=UserPath(dir_okay=True, path_type=Path))
@click.argument("b", type=UserPath(dir_okay=True, path_type=Path))
@kernels_option
@click.option("--json", "as_json", is_flag=True, help='Print {"identical": ..., "ops": [...], ...}.')
def diff(a, b, kernels, as_json):
    """Compare captures A and B structurally.

    \b
    Says first what changed in code: each kernel whose own code differs
    (the per-kernel hash in its symbol, and its function's bytes in the
    module object), once; a module rebuilt with otherwise identical kernels
    is one line. Then versions and device, regions (sizes, initial-data
    digests), bindings, kernels and modules, and the op streams aligned like
    a text diff, with per-field changes: launch dims, scalar arguments
    (numbered from 0 as `wrp inspect` numbers them, decoded through the
    kernel-argument annotations where present), relocations, IF/WHILE
    bodies, enum fields by name. Pointer values patched at load are not
    differences: one program captured twice diffs as identical, and so is
    a region whose initial data an op overwrites before anything reads it.
    Array arguments read as their descriptors (shape 128 -> 64), the same
    change repeated (a step launched in a loop) is one entry with its count,
    and --kernels FILE.py types a stock capture's scalars as numbers.
    Exit codes: 0 identical; 1 different; 2 or more: could not compare,
    with the code of the reason (2 a path missing or unreadable, or a bad
    option; 3 an input invalid or of another Warp version), never 1.

    \b
    Examples:
      wrp diff v1.wrp v2.wrp
      wrp diff stock_v1.wrp stock_v2.wrp --kernels sim.py
      wrp diff a.wrp b.wrpk --json | jq '.ops[] | select(.change=="changed")'
    """
    from ..debug.diff import diff as run_diff  # noqa: PLC0415
    from ..errors import EXIT_FAILED, EXIT_USAGE, WrpError  # noqa: PLC0415

    try:
        res = run_diff(a, b, kernels=kernels)
    except WrpError as e:
        # 1 means "different" here, so a failure that is 1 elsewhere (a file that cannot be
        # read) is 2, "could not compare", as diff(1) answers trouble.
        if e.exit_code == EXIT_FAILED:
            e.exit_code = EXIT_USAGE
        raise
    if as_json:
        dump_json(res.to_json())
        sys.exit(0 if res.identical else 1)
    con = console()
    if res.identical:
        extra = (f" (the initial data of {len(res.overwritten)} region(s) differs but is overwritten before "
                 "it is read)") if res.overwritten else ""
        con.print(f"[green]identical:[/] {escape(str(a))} and {escape(str(b))}{extra}", highlight=False)
        sys.exit(0)
    lines = [f"--- {a}", f"+++ {b}"]
    for k, v in res.header.items():
        lines.append(f"{k}: {_short(v['a'])} -> {_short(v['b'])}")
    if res.code:
        lines.append("code:")
        for c in res.code:
            how = f"hash {c['hash']['a']} -> {c['hash']['b']}" if c["hash"]["a"] != c["hash"]["b"] else \
                "same hash, function bytes differ"
            lines.append(f"  kernel {c['kernel']}: code changed ({how})")
    for section, key in (("modules", "module"), ("regions", "region"), ("bindings", "binding"),
                         ("kernels", "kernel")):
        rows = getattr(res, section)
        if rows:
            lines.append(f"{section}:")
            for r in rows:
                if key == "module" and r["change"] == "changed" and "module_hash" in r["fields"]:
                    h = r["fields"]["module_hash"]
                    why = (f"kernel code changed: {', '.join(r['code_changed'])}" if r["code_changed"]
                           else "its kernels' code is unchanged")
                    lines.append(f"  module {r[key]} rebuilt ({why})")
                    lines.append(f"      hash {_abbrev(h['a'])} -> {_abbrev(h['b'])} (--json: whole)")
                    rest = {k: v for k, v in r["fields"].items()
                            if k not in ("module_hash", "binary_filename", "binary_digest")}
                    lines += _field_lines(rest, "      ")
                    continue
                lines.append(f"  {r['change']} {key} {r[key]}")
                lines += _field_lines(r["fields"], "      ")
    if res.ops:
        lines.append(f"ops ({len(res.ops)} difference(s)):")
        lines += _op_lines(res.ops)
    if res.overwritten:
        ids = ", ".join(str(o["region"]) for o in res.overwritten)
        lines.append(f"note: the initial data of region(s) {ids} differs, but an op overwrites it before any op "
                     "reads it: not a difference")
    for line in lines:
        con.print(line, markup=False, highlight=False)
    sys.exit(1)
