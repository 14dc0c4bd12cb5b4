"""``wrp graph``: a picture of a capture as one offline HTML file, an SVG or Graphviz text."""

from __future__ import annotations

from pathlib import Path

import click

from .options import UserPath, kernels_option

from .output import console, dump_json, size

_FORMATS = (".html", ".svg", ".dot")


@click.command()
@click.argument("file", type=UserPath(dir_okay=True))
@click.option("-o", "--output", "out", type=UserPath(dir_okay=False),
              help="Where to write: OUT.html (default FILE's stem + .html), OUT.svg or OUT.dot.")
@click.option("--open", "open_it", is_flag=True, help="Open the result in the default web browser.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.option("--no-verify", is_flag=True, help="For .wrpk: skip blob checksum verification.")
@kernels_option
@click.option("--profile", "profile_path", type=UserPath(exists=True, dir_okay=False), metavar="PROFILE.json",
              help="Colour each op by its share of the time in a `wrp profile -o` file (or its --json).")
def graph(file, out, open_it, as_json, no_verify, kernels, profile_path):
    """Draw a capture: ops in order, arrays as data nodes, read and write edges.

    \b
    HTML (default): one self-contained file that works offline from file://,
    with IF/WHILE bodies and repeated op sequences (folded into one xN group)
    that fold and unfold, search by kernel or binding name, and details of any
    op or array on click.  .svg: a static picture.  .dot: Graphviz text.
    Edges say read, write or read+write where wrpkit recorded it at capture,
    and "touches" for files without that record.  With --profile, each op
    (and each IF, WHILE and folded xN group, summed) is coloured by its
    share of the profiled time (a colour-blind-safe scale with a legend)
    and shows its time; the details panel adds total, share, runs and
    time per run.

    \b
    Examples:
      wrp graph step.wrp                  writes step.html
      wrp graph step.wrp -o step.svg      a static picture
      wrp graph step.wrpk -o step.dot && dot -Tpng step.dot -o step.png
      wrp graph step.wrp --open
      wrp profile step.wrp -o step.profile.json && wrp graph step.wrp --profile step.profile.json
    """
    from ..debug.graph_render import write_graph  # noqa: PLC0415
    from ..formats.container import open_capture  # noqa: PLC0415

    src = Path(file)
    dest = Path(out) if out else src.with_suffix(".html")
    if dest.suffix.lower() not in _FORMATS:
        raise click.UsageError(f"cannot tell the format of {dest.name!r}: the output must end in .html, .svg "
                               "or .dot")
    profile = None
    if profile_path is not None:
        from ..debug.profile_format import load_profile  # noqa: PLC0415

        profile = load_profile(profile_path)
    from ..output_paths import check_output_path  # noqa: PLC0415

    with open_capture(file, verify_checksums=not no_verify) as cap:
        check_output_path(dest, [src])
        if kernels:  # imports the user's kernels, and so Warp: only when asked
            from ..run.capture.source_types import type_program  # noqa: PLC0415

            type_program(cap.program, kernels)
        if profile is not None:
            from ..debug.profile_format import check_profile_matches  # noqa: PLC0415

            check_profile_matches(profile, cap.program)
        info = write_graph(cap.program, dest, dest.suffix.lower().lstrip("."), title=src.name, profile=profile)
    if as_json:
        dump_json(info)
    else:
        console().print(f"wrote {info['path']} ({info['format']}, {size(info['bytes'])}: {info['ops']} ops, "
                        f"{info['arrays']} arrays)", highlight=False, markup=False)
    if open_it:
        import webbrowser  # noqa: PLC0415

        if not webbrowser.open(dest.resolve().as_uri()):
            click.echo(f"note: no browser could be started; open {dest} yourself", err=True)
