"""The outputs of ``wrp regress`` besides its table: JUnit XML and an offline HTML page.

JUnit: one ``testsuite`` (the suite folder) with a ``properties`` block
(device, engine, Warp and wrpkit versions, where it ran), one ``testcase``
per case (``name`` is the case's path, ``classname`` the suite's), and a
``failure``, ``error`` or ``skipped`` child carrying the message; an
expected failure that failed is ``skipped`` with the reason.

HTML: one self-contained page with no script at all, and a
Content-Security-Policy that forbids every fetch (the rules of ``wrp
graph``'s page): it opens from ``file://`` offline.
"""

from __future__ import annotations

import html
import socket
import xml.etree.ElementTree as ET


def _props(report) -> dict:
    from ... import __version__  # noqa: PLC0415

    return {"device": report.device or "each case's own", "engine": report.engine,
            "warp_version": report.warp_version or "not installed", "wrpkit_version": __version__,
            "ran_on": report.ran_on}


def junit_xml(report) -> str:
    """The report as JUnit XML text (``<testsuites>`` root)."""
    counts = report.counts()
    failures = counts["fail"] + counts["xpass"]
    skipped = counts["skip"] + counts["xfail"]
    root = ET.Element("testsuites", name="wrp regress", tests=str(len(report.cases)), failures=str(failures),
                      errors=str(counts["error"]), skipped=str(skipped), time=f"{report.seconds:.3f}")
    suite = ET.SubElement(root, "testsuite", name=report.suite, tests=str(len(report.cases)),
                          failures=str(failures), errors=str(counts["error"]), skipped=str(skipped),
                          time=f"{report.seconds:.3f}", timestamp=report.started, hostname=socket.gethostname())
    props = ET.SubElement(suite, "properties")
    for k, v in _props(report).items():
        ET.SubElement(props, "property", name=k, value=str(v))
    classname = "wrp-regress." + (report.suite.rstrip("/").split("/")[-1] or "suite")
    for c in report.cases:
        tc = ET.SubElement(suite, "testcase", name=c.name, classname=classname, time=f"{c.seconds:.3f}")
        if c.file:
            tc.set("file", c.file)
        cp = ET.SubElement(tc, "properties")
        ET.SubElement(cp, "property", name="device", value=str(c.device or ""))
        ET.SubElement(cp, "property", name="verdict", value=c.verdict)
        if c.replay_ms is not None:
            ET.SubElement(cp, "property", name="replay_ms", value=f"{c.replay_ms:.3f}")
        if c.updated:
            ET.SubElement(cp, "property", name="updated", value=c.updated)
        detail = c.message + (f"\nhint: {c.hint}" if c.hint else "")
        if c.verdict in ("fail", "xpass"):
            ET.SubElement(tc, "failure", message=c.message, type="mismatch" if c.verdict == "fail"
                          else "unexpected-pass").text = detail
        elif c.verdict == "error":
            ET.SubElement(tc, "error", message=c.message, type=c.error_class or "error").text = detail
        elif c.verdict in ("skip", "xfail"):
            ET.SubElement(tc, "skipped", message=c.message or c.verdict)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em;margin:0 0 .3em}
.meta{color:#555;margin-bottom:1em}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #ddd;vertical-align:top}
th{background:#f4f4f4}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.v{font-weight:600;white-space:nowrap}
.pass,.xfail{color:#1a7f37}.fail,.xpass{color:#c62828}.error{color:#b35900}.skip{color:#666}
.chips span{display:inline-block;margin-right:1em}
details{margin-top:.2em}pre{white-space:pre-wrap;margin:.3em 0;font-size:12px}
"""


def html_page(report) -> str:
    """The report as one self-contained HTML page (no script; a CSP forbids any fetch)."""
    e = html.escape
    counts = report.counts()
    chips = "".join(f'<span class="{v}">{counts[v]} {v}</span>' for v in counts if counts[v])
    rows = []
    for c in report.cases:
        details = ""
        if c.bindings:
            lines = []
            for name, b in c.bindings.items():
                mark = "ok" if b.get("ok") else "MISMATCH"
                extra = f" - {b['reason']}" if b.get("reason") else ""
                lines.append(f"{name}: {mark}; max abs {b.get('max_abs')}, max rel {b.get('max_rel')}, "
                             f"{b.get('mismatches')} of {b.get('size')} differ{extra}")
            details = f"<details><summary>bindings</summary><pre>{e(chr(10).join(lines))}</pre></details>"
        msg = e(c.message) + (f"<br><i>hint: {e(c.hint)}</i>" if c.hint else "")
        if c.updated:
            msg += f"<br>{e(c.updated)}"
        rows.append(f'<tr><td>{e(c.name)}</td><td class="v {e(c.verdict)}">{e(c.verdict)}</td>'
                    f'<td>{e(str(c.device or ""))}</td><td class="num">{c.seconds:.2f}</td>'
                    f"<td>{msg}{details}</td></tr>")
    meta = ", ".join(f"{k.replace('_', ' ')}: {e(str(v))}" for k, v in _props(report).items())
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>wrp regress {e(report.suite)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>wrp regress {e(report.suite)}</h1>
<div class="meta">{meta}; started {e(report.started)}, {report.seconds:.1f} s</div>
<div class="chips">{chips}</div>
<table>
<thead><tr><th>case</th><th>verdict</th><th>device</th><th>seconds</th><th>message</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
</table>
</body>
</html>
"""


__all__ = ["junit_xml", "html_page"]
