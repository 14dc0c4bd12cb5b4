"""The rules of Chrome's Trace Event Format that `wrp profile -o` files must keep, checked offline.

Perfetto UI needs the network and Debian's Chromium no longer serves
``chrome://tracing``; Chromium's DevTools Performance panel does load these
files offline (``tests/devtools_trace.py``), but takes seconds a file, so
every file is first checked here against the format's documented rules (the
"Trace Event Format" document, and what Perfetto's JSON importer, the
catapult viewer and the Performance panel require of it):

* the JSON object form: ``{"traceEvents": [...]}``, plus optional
  ``displayTimeUnit`` (``"ms"`` or ``"ns"`` only) and ``otherData``;
* strict JSON: no ``NaN``/``Infinity`` (a browser's ``JSON.parse`` refuses them);
* every event has ``name`` (string), ``ph`` (one letter), ``pid`` and ``tid``
  (integers); ``args``, where present, is an object;
* a complete event (``"ph": "X"``) has ``ts`` and ``dur``, numbers in
  microseconds, ``dur`` not negative;
* a metadata event (``"ph": "M"``) named ``process_name`` or ``thread_name``
  carries ``args.name`` (a string);
* complete events on one thread nest or are disjoint (a viewer draws them as
  a stack; a partial overlap is "improperly nested" and mis-drawn), with ends
  computed as a viewer does, ``ts + dur`` in floating point: Chromium's
  Performance panel drops a child that ends ``5e-12`` us after its parent.

Used by ``tests/debug/test_profile.py`` and ``bench/bench_profile.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

DISPLAY_UNITS = ("ms", "ns")
METADATA_NAMED = ("process_name", "thread_name")


def _no_constants(name):
    raise AssertionError(f"{name} is not JSON (JSON.parse in a browser refuses it)")




def check_trace_event_file(path) -> dict:
    """Check a trace-event JSON file against the rules above.

    Args:
        path: The file (``wrp profile -o``).

    Returns:
        ``{"events": complete events, "ops": those with an op's ``args.seq``, "bytes": file size,
        "data": the parsed file}``.

    Raises:
        AssertionError: A rule is broken; the message says which and where.
    """
    path = Path(path)
    text = path.read_bytes().decode("utf-8")  # the format is UTF-8 JSON
    data = json.loads(text, parse_constant=_no_constants)
    assert isinstance(data, dict), "not the JSON object form"
    assert isinstance(data.get("traceEvents"), list), "no traceEvents list"
    if "displayTimeUnit" in data:
        assert data["displayTimeUnit"] in DISPLAY_UNITS, f"displayTimeUnit {data['displayTimeUnit']!r}"
    threads: dict = {}
    for i, e in enumerate(data["traceEvents"]):
        where = f"event {i} {e!r:.120}"
        assert isinstance(e, dict), where
        assert isinstance(e.get("name"), str) and e["name"], f"{where}: no name"
        assert isinstance(e.get("ph"), str) and len(e["ph"]) == 1, f"{where}: ph"
        for k in ("pid", "tid"):
            assert isinstance(e.get(k), int) and not isinstance(e[k], bool), f"{where}: {k}"
        if "args" in e:
            assert isinstance(e["args"], dict), f"{where}: args is not an object"
        if e["ph"] == "X":
            for k in ("ts", "dur"):
                assert isinstance(e.get(k), (int, float)) and not isinstance(e[k], bool), f"{where}: {k}"
            assert e["dur"] >= 0 and e["ts"] >= 0, f"{where}: negative time"
            threads.setdefault((e["pid"], e["tid"]), []).append((i, e))
        elif e["ph"] == "M" and e["name"] in METADATA_NAMED:
            assert isinstance(e.get("args", {}).get("name"), str), f"{where}: metadata without args.name"
        else:
            assert e["ph"] == "M", f"{where}: only complete and metadata events are expected"
    for evs in threads.values():
        # A viewer's stack, in start order; at one start the longer (enclosing) event first, as in the file.
        stack: list = []
        # Ends in floating point, ts + dur, as a viewer computes them (a child that ends a rounding error
        # after its parent is dropped by Chromium's Performance panel).
        for i, e in sorted(evs, key=lambda p: (p[1]["ts"], -p[1]["dur"], p[0])):
            start = e["ts"]
            end = start + e["dur"]
            while stack and stack[-1][0] <= start and not (stack[-1][0] == start == end):
                stack.pop()
            assert not stack or end <= stack[-1][0], (
                f"event {i} {e['name']!r} [{start!r}, {end!r}] us overlaps event {stack[-1][1]} that encloses its "
                f"start (ending at {stack[-1][0]!r})")
            stack.append((end, i))
    xs = [e for evs in threads.values() for _, e in evs]
    return {"events": len(xs), "ops": sum(1 for e in xs if "seq" in e.get("args", {})),
            "bytes": path.stat().st_size, "data": data}
