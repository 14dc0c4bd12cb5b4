"""``wrp inspect``: summary tables, every op, or JSON with stable keys."""

from __future__ import annotations

import click

from .output import console, dump_json, size, table


@click.command()
@click.argument("file", type=click.Path(dir_okay=True, allow_dash=False))
@click.option("--ops", "with_ops", is_flag=True, help="List every op with its key fields, nested bodies indented.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (stable keys) instead of tables.")
@click.option("--no-verify", is_flag=True, help="For .wrpk: skip blob checksum verification (trusted files only).")
def inspect(file, with_ops, as_json, no_verify):
    """Summarize a capture: versions, device, sections, ops, kernels, bindings, regions, modules.

    Reads only the file's records (region and module contents are not read)
    and never imports Warp, so it is fast on large files.
    """
    from ..formats.container import open_capture  # noqa: PLC0415
    from ..checks.summary import binding_signature_rows, iter_op_lines, kernel_signatures, summarize  # noqa: PLC0415

    with open_capture(file, verify_checksums=not no_verify) as cap:
        info = summarize(cap, with_ops=with_ops and as_json, signature=binding_signature_rows(cap.program))
        if as_json:
            dump_json(info)
            return
        _print_summary(info)
        if with_ops:
            _print_ops(iter_op_lines(cap.program.ops, signatures=kernel_signatures(cap.program)))



def _print_summary(info: dict) -> None:
    con = console()
    con.print(f"[bold]{info['file']}[/]  ({info['container']}, {size(info['file_size'])})")
    con.print(f"  format {info['format_version']}   Warp {info['warp_version']}   device {info['device']}"
              f"   target arch {info['target_arch']}")
    con.print(f"  {info['op_total']} ops ({info['top_level_ops']} top level, nesting depth {info['max_depth']}), "
              f"{len(info['kernels'])} kernels, {len(info['bindings'])} bindings, {len(info['regions'])} regions, "
              f"{len(info['modules'])} modules")
    con.print()
    t = table("Sections", ["name", "offset", "size"])
    for s in info["sections"]:
        t.add_row(s["name"], str(s["offset"]), size(s["size"]))
    con.print(t)
    t = table("Ops", ["op", "count"])
    for k, v in info["op_counts"].items():
        t.add_row(k, str(v))
    con.print(t)
    t = table("Kernels", ["kernel", "module", "launches", "backward"])
    for k in info["kernels"]:
        t.add_row(k["kernel_key"], f"{k['module_name']} {k['module_hash'][:8]}", str(k["launches"]),
                  "yes" if k["backward_name"] else "no")
    con.print(t)
    t = table("Bindings", ["name", "region", "size", "dtype", "shape"])
    for b in info["bindings"]:
        shape = "x".join(str(s) for s in b["shape"]) if b.get("shape") is not None else "-"
        t.add_row(b["name"], str(b["region_id"]), size(b["size"]), b.get("dtype") or "-", shape)
    con.print(t)
    t = table("Regions", ["region", "size", "initial data"])
    for r in info["regions"]:
        t.add_row(str(r["region_id"]), size(r["size"]), "yes" if r["has_initial_data"] else "no")
    con.print(t)
    t = table("Modules", ["module", "file", "size", "status"])
    for mod in info["modules"]:
        status = "[green]present[/]" if mod["present"] else f"[red]{mod['state']}[/]"
        t.add_row(f"{mod['module_name']} {mod['module_hash'][:8]}", mod["binary_filename"], size(mod["size"]),
                  status)
    con.print(t)
    if info["meshes"]:
        t = table("Meshes", ["points", "tris", "points region", "indices region"])
        for me in info["meshes"]:
            t.add_row(str(me["num_points"]), str(me["num_tris"]), str(me["points_region_id"]),
                      str(me["indices_region_id"]))
        con.print(t)


def _print_ops(lines) -> None:
    con = console()
    con.print("[bold]Ops[/]")
    for depth, index, name, line in lines:
        pad = "  " * depth
        if not line:
            con.print(f"  {pad}[dim]{name}[/]")
        else:
            con.print(f"  {pad}[cyan]{index:>5}[/] [bold]{name}[/] {line}", markup=True, highlight=False)
