"""``wrp inspect``: summary tables, every op, or JSON with stable keys."""

from __future__ import annotations

import click

from ..checks.summary import shape_text
from .options import UserPath, kernel_match_lines, kernels_option
from .output import console, dump_json, plural, size, styled, table


@click.command()
@click.argument("file", type=UserPath(exists=True, dir_okay=True, allow_dash=False))
@click.option("--ops", "with_ops", is_flag=True,
              help="List every op with its key fields (and the binding each launch argument points to), "
                   "nested bodies indented, and where the program issued it (captures made with wrpkit.capture).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (stable keys) instead of tables.")
@click.option("--verify", is_flag=True,
              help="For .wrpk: also hash every blob (region data, modules) against its SHA-256, as wrp validate "
                   "does; by default inspect reads the records only.")
@click.option("--no-verify", is_flag=True, hidden=True, help="Kept for old scripts: blobs are not hashed anyway.")
@kernels_option
def inspect(file, with_ops, as_json, verify, no_verify, kernels):
    """Summarize a capture: versions, device, sections, ops, kernels, bindings, regions, modules.

    Reads only the file's records (region and module contents are not read,
    and a .wrpk's blobs are not hashed: `wrp validate` or --verify does that)
    and never imports Warp, so it is fast on large files.

    \b
    Bindings have one row each, with their roles: a binding given to
    capture_save as input and as output (an in-place array) is one row
    with both.  In --json: "input" and "output" are true, false, or null
    where a stock file does not record it.  A capture made with
    wrpkit.capture says where each op was issued ("source" per op in --json,
    "at sim.py:42 in step()" with --ops) and where each kernel is defined.

    \b
    Examples:
      wrp inspect graph.wrp
      wrp inspect graph.wrp --ops
      wrp inspect graph.wrp --json | jq .bindings
    """
    from ..formats.container import open_capture  # noqa: PLC0415
    from ..checks.effects import kernel_signatures  # noqa: PLC0415
    from ..checks.summary import binding_signature_rows, iter_op_lines, region_names, summarize  # noqa: PLC0415

    from ..checks.sources import Sources  # noqa: PLC0415

    with open_capture(file, verify_checksums=verify and not no_verify, thorough=True) as cap:
        typing = None
        sources = Sources.of(cap.program)
        if kernels:  # imports the user's kernels, and so Warp: only when asked
            from ..run.source_types import type_program  # noqa: PLC0415

            typed = type_program(cap.program, kernels)
            typing = typed.to_json()
            if getattr(typed, "annotations", None) is not None:  # the kernels' definition lines
                sources = Sources(typed.annotations, cap.program.ops)
        info = summarize(cap, with_ops=with_ops and as_json, signature=binding_signature_rows(cap.program),
                         sources=sources)
        from ..formats.signature import describe  # noqa: PLC0415

        info["signed"] = describe(file)
        if as_json:
            if typing is not None:
                info["kernels_typed"] = typing
            dump_json(info)
            return
        _print_summary(info)
        for line in kernel_match_lines(typing):
            console().print(line, highlight=False)
        if with_ops:
            _print_ops(iter_op_lines(cap.program.ops, signatures=kernel_signatures(cap.program),
                                     names=region_names(cap.program), program=cap.program, sources=sources))


def _arch(info: dict) -> str:
    if info["device"] == "cpu" or not info["target_arch"]:
        return f"{info['target_arch']} (CPU)" if info["device"] == "cpu" else str(info["target_arch"])
    return f"sm_{info['target_arch']}"


def _roles(b: dict) -> str:
    roles = [r for r in ("input", "output") if b.get(r)]
    if roles:
        return ", ".join(roles)
    return "-" if b.get("input") is False and b.get("output") is False else "?"


def _print_summary(info: dict) -> None:
    con = console()
    con.print(styled((info["file"], "bold"), f"  ({info['container']}, {size(info['file_size'])})"))
    con.print(f"  format {info['format_version']}   Warp {info['producer']}   device {info['device']}"
              f"   target arch: {_arch(info)}", markup=False)
    con.print(f"  {plural(info['op_total'], 'op')} ({info['top_level_ops']} top level, nesting depth "
              f"{info['max_depth']}), {plural(len(info['kernels']), 'kernel')}, "
              f"{plural(len(info['bindings']), 'binding')}, {plural(len(info['regions']), 'region')}, "
              f"{plural(len(info['modules']), 'module')}", markup=False)
    signed = info.get("signed")
    if signed is None:
        con.print("  unsigned (no STEM.sig beside it)", markup=False)
    elif "error" in signed:
        con.print(f"  signature {signed['path']}: unreadable ({signed['error']})", markup=False)
    else:
        who = signed["key"][:23] + "…" if signed["key"] else "a key with no hint"
        con.print(f"  signed: {signed['path']}, {signed['kind']} {who} (unverified: wrp validate "
                  "--trusted-key checks it)", markup=False)
    t = table("Sections", ["name", "offset", "size"])
    for s in info["sections"]:
        t.add_row(s["name"], str(s["offset"]), size(s["size"]))
    con.print(t)
    t = table("Ops", ["op", "count"])
    for k, v in info["op_counts"].items():
        t.add_row(k, str(v))
    con.print(t)
    with_source = any(k.get("source") for k in info["kernels"])
    t = table("Kernels", ["kernel", "module", "launches", "backward"] + (["defined at"] if with_source else []))
    for k in info["kernels"]:
        src = k.get("source")
        t.add_row(k["name"], f"{k['module_name']} {k['module_hash'][:8]}", str(k["launches"]),
                  "has adjoint" if k["backward_name"] else "-",
                  *([f"{src['file']}:{src['line']}" if src else "-"] if with_source else []))
    con.print(t)
    t = table("Bindings", ["name", "role", "region", "size", "dtype", "shape"])
    for b in info["bindings"]:
        shape = shape_text(b["shape"]) if b.get("shape") is not None else "-"
        t.add_row(b["name"], _roles(b), str(b["region_id"]), size(b["size"]), b.get("dtype") or "-", shape)
    con.print(t)
    t = table("Regions", ["region", "name", "size", "dtype", "shape", "initial data"])
    for r in info["regions"]:
        dtype = r.get("dtype") or ("conflict" if r.get("conflicts") and not r.get("dtype") else "-")
        t.add_row(str(r["region_id"]), r.get("name") or "-", size(r["size"]), dtype,
                  shape_text(r["shape"]) if r.get("shape") is not None else "-",
                  "yes" if r["has_initial_data"] else "no")
    con.print(t)
    for r in info["regions"]:
        for c in r.get("conflicts") or ():
            con.print(styled((f"region {r['region_id']} ({r.get('name')}): sources disagree on its type: {c}",
                              "yellow")))
    t = table("Modules", ["module", "file", "size", "status"])
    for mod in info["modules"]:
        status = styled(("present", "green")) if mod["present"] else styled((mod["state"], "red"))
        t.add_row(f"{mod['module_name']} {mod['module_hash'][:8]}", mod["binary_filename"], size(mod["size"]),
                  status)
    con.print(t)
    if info["meshes"]:
        t = table("Meshes", ["points", "tris", "points region", "indices region"])
        for me in info["meshes"]:
            t.add_row(str(me["num_points"]), str(me["num_tris"]), str(me["points_region_id"]),
                      str(me["indices_region_id"]))
        con.print(t)
    if any(b.get("input") is None for b in info["bindings"]):
        con.print("[dim]role ?: the file does not record whether the binding is an input or an output "
                  "(save with wrpkit to add a signature)[/]")


def _print_ops(lines) -> None:
    con = console()
    con.print("[bold]Ops[/]")
    for depth, index, name, line in lines:
        pad = "  " * depth
        if not line:
            con.print(styled(f"  {pad}", (name, "dim")))
        else:
            con.print(styled(f"  {pad}", (f"{index:>5}", "cyan"), " ", (name, "bold"), f" {line}"),
                      highlight=False)
