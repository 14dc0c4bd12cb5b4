"""Open a Chrome trace-event file in Chromium's own DevTools Performance panel, offline, and read back what it drew.

Debian's Chromium no longer serves ``chrome://tracing`` and Perfetto UI needs
the network, but every Chromium carries the DevTools front end, and its
Performance panel imports trace-event JSON files ("Load profile").  With
``--remote-debugging-port`` the browser serves that front end itself over
HTTP from its own resources (``http://127.0.0.1:PORT/devtools/devtools_app.html``),
so a Playwright page can open the panel, hand the file to the panel's
"Load profile" file input, as a user picking the file does, and then read
the panel's own test hooks (``TimelinePanel.getTraceEngineRawTraceEventsForLayoutTests``
and the main flame chart's timeline data, the entries it draws).

A file the panel cannot parse raises a page error (``Unexpected end of JSON
input``) and no trace becomes active: :func:`load_in_devtools` raises
:class:`DevToolsLoadError` then.

Used by ``tests/debug/test_profile.py`` and ``bench/bench_profile.py``.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Optional

CHROMIUM = os.environ.get("WRP_CHROMIUM", "/usr/bin/chromium")

# What the panel holds once a file is loaded: the raw events its trace engine parsed, and the main flame
# chart's entries (title, start and duration in ms).  Throws "No trace index active." until a trace is loaded.
_READ = """async () => {
  const tl = await import('/devtools/panels/timeline/timeline.js');
  const panel = tl.TimelinePanel.TimelinePanel.instance();
  const raw = panel.getTraceEngineRawTraceEventsForLayoutTests();
  const chart = panel.getFlameChart().getMainFlameChart();
  const data = chart.timelineData();
  const provider = chart.dataProvider || chart.timelineDataProvider;
  const entries = [];
  for (let i = 0; i < data.entryLevels.length; i++) {
    entries.push([provider.entryTitle(i), data.entryStartTimes[i], data.entryTotalTimes[i], data.entryLevels[i]]);
  }
  return {raw: raw.length, entries, groups: data.groups.map(g => g.name)};
}"""

_EXPAND = """async () => {
  const tl = await import('/devtools/panels/timeline/timeline.js');
  const chart = tl.TimelinePanel.TimelinePanel.instance().getFlameChart().getMainFlameChart();
  chart.timelineData().groups.forEach((g, i) => chart.expandGroup(i));
}"""


class DevToolsLoadError(AssertionError):
    """The Performance panel did not load the file (a parse error, or no trace after the timeout)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_in_devtools(trace_path, *, screenshot: Optional[Path] = None, chromium: str = CHROMIUM,
                     timeout: float = 60.0) -> dict:
    """Load ``trace_path`` in Chromium's DevTools Performance panel and return what the panel drew.

    Args:
        trace_path: A Chrome trace-event JSON file.
        screenshot: Where to save a picture of the panel with every track expanded (optional).
        chromium: The Chromium binary (Playwright's ``executable_path``).
        timeout: Seconds to wait for the panel to finish loading.

    Returns:
        ``{"raw_events": events the trace engine parsed, "entries": [(name, start ms, duration ms, level)]
        of the main flame chart, "groups": its track names, "load_s": seconds from handing over the file
        to the panel holding it, "page_errors": []}``.

    Raises:
        DevToolsLoadError: The page raised an error, or no trace was loaded within ``timeout``.
        ImportError: Playwright is not installed.
    """
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    port = _free_port()
    errors: list = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", f"--remote-debugging-port={port}"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{port}/devtools/devtools_app.html?panel=timeline", timeout=timeout * 1e3)
            file_input = page.locator("input[type=file]").first  # the panel's "Load profile" input
            file_input.wait_for(state="attached", timeout=timeout * 1e3)
            t0 = time.perf_counter()
            file_input.set_input_files(str(trace_path))
            deadline = t0 + timeout
            while True:
                try:
                    got = page.evaluate(_READ)
                except Exception as e:  # noqa: BLE001  (the panel's "No trace index active." until loaded)
                    got, last = None, str(e)
                if got is not None and got["entries"]:
                    break
                if errors:
                    raise DevToolsLoadError(f"DevTools failed to load {trace_path}: {errors[0]}")
                if time.perf_counter() > deadline:
                    raise DevToolsLoadError(f"DevTools loaded no trace from {trace_path} in {timeout:.0f} s: "
                                            f"{last if got is None else 'no entries drawn'}")
                time.sleep(0.05)
            load_s = time.perf_counter() - t0
            if screenshot is not None:
                # the first-run "keyboard shortcuts" pop-up closes on Escape, which also opens the console
                # drawer; a second Escape closes that
                page.keyboard.press("Escape")
                page.wait_for_timeout(200)
                page.keyboard.press("Escape")
                page.evaluate(_EXPAND)
                page.wait_for_timeout(500)
                page.screenshot(path=str(screenshot))
        finally:
            browser.close()
    if errors:
        raise DevToolsLoadError(f"DevTools reported an error loading {trace_path}: {errors[0]}")
    return {"raw_events": got["raw"], "entries": [tuple(e) for e in got["entries"]], "groups": got["groups"],
            "load_s": load_s, "page_errors": errors}
