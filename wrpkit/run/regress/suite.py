"""A ``wrp regress`` suite: its cases on disk and its ``wrp-suite.toml`` settings.

A suite is a folder of captures (``NAME.wrp`` with ``NAME_modules/``, or
``NAME.wrpk``), each with optional ``NAME_inputs.npz`` and a golden
``NAME_expected.npz``; :func:`discover` finds them, in path order, and gives
each the settings of :func:`read_suite_config` (see :mod:`wrpkit.run.regress.runner`).
"""

from __future__ import annotations

import fnmatch
import math
import os
import sys
from pathlib import Path
from typing import Optional

from ...records import field, record
from ...errors import EXIT_USAGE, WrpError, WrpNotFoundError

#: The suite's settings file, at the suite's root.
SUITE_FILE = "wrp-suite.toml"
#: Seconds a case may take when neither the suite nor the caller says (a hang must not block CI).
DEFAULT_TIMEOUT = 300.0
#: Keys a ``[defaults]`` or ``[cases."PATTERN"]`` table may hold.
CASE_KEYS = {"rtol": (int, float), "atol": (int, float), "equal_nan": (bool,), "timeout": (int, float),
             "device": (str,), "expect": (str,), "skip": (str,), "reason": (str,)}


@record
class CaseSettings:
    """What a case is checked with (suite defaults, then the caller's options, then the case's own entry)."""

    rtol: float = 1e-5
    atol: float = 1e-6
    equal_nan: bool = False
    timeout: Optional[float] = DEFAULT_TIMEOUT
    device: Optional[str] = None  # None: the capture's own device family (cpu, or cuda:0)
    expect: Optional[str] = None  # "fail": known not to pass
    skip: Optional[str] = None  # a reason: never run
    reason: Optional[str] = None  # why it is expected to fail


@record
class Case:
    """One capture of a suite and the files beside it.

    Attributes:
        name: Its path below the suite, without the extension (``sub/step``).
        capture: The ``.wrp`` or ``.wrpk``.
        modules_dir: ``NAME_modules/`` of a ``.wrp`` (None for a bundle).
        inputs: ``NAME_inputs.npz``, or None when there is none.
        golden: ``NAME_expected.npz`` (it may not exist yet).
        settings: The :class:`CaseSettings` it runs with.
    """

    name: str
    capture: Path
    modules_dir: Optional[Path]
    inputs: Optional[Path]
    golden: Path
    settings: CaseSettings = field(default_factory=CaseSettings)


def _toml_line(text: str, key: str) -> Optional[int]:
    """The line (1-based) where ``key`` is first written in a TOML text, for an error message."""
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith(key) or s.startswith(f'"{key}"') or f'"{key}"' in s or f"[{key}" in s:
            return i
    return None


def _config_error(path: Path, text: str, message: str, key: str) -> WrpError:
    line = _toml_line(text, key)
    where = f"{path}, line {line}" if line else str(path)
    return WrpError(f"{where}: {message}", hint=f"See docs/regress.md for the keys {SUITE_FILE} takes.")


def _check_table(path: Path, text: str, table: dict, where: str) -> dict:
    out = {}
    for key, value in table.items():
        if key not in CASE_KEYS:
            raise usage_error(_config_error(path, text, f"unknown key {key!r} in {where} (known: "
                                            f"{', '.join(sorted(CASE_KEYS))})", key))
        types = CASE_KEYS[key]
        if not isinstance(value, types) or (bool in types) != isinstance(value, bool):
            want = "true or false" if bool in types else "a number" if int in types else "a string"
            raise usage_error(_config_error(path, text, f"{key} in {where} must be {want}, not {value!r}", key))
        if key in ("rtol", "atol") and not (math.isfinite(value) and value >= 0):
            raise usage_error(_config_error(path, text, f"{key} in {where} must be a finite number >= 0", key))
        if key == "timeout" and not (math.isfinite(value) and value > 0):
            raise usage_error(_config_error(path, text, f"timeout in {where} must be a number of seconds above 0", key))
        if key == "expect" and value != "fail":
            raise usage_error(_config_error(path, text, f'expect in {where} must be "fail", not {value!r}', key))
        if key == "device":
            from ...environment import parse_device  # noqa: PLC0415

            try:
                parse_device(value)
            except WrpError as e:
                raise usage_error(_config_error(path, text, f"device in {where}: {e.message}", key)) from None
        out[key] = float(value) if key in ("rtol", "atol", "timeout") else value
    return out


def usage_error(e: WrpError) -> WrpError:
    """``e`` with exit code 2 (a usage error: the suite, its settings or an option is wrong)."""
    e.exit_code = EXIT_USAGE
    return e


def read_suite_config(path) -> tuple:
    """Read a ``wrp-suite.toml``: ``(defaults, [(pattern, settings)])``.

    The file has an optional ``[defaults]`` table and ``[cases."PATTERN"]``
    tables, PATTERN a case name or a glob (``"cloth/*"``); every table whose
    pattern matches a case applies to it, in the file's order.  Keys:
    ``rtol``, ``atol``, ``equal_nan``, ``timeout`` (seconds), ``device``,
    ``expect = "fail"`` with an optional ``reason``, and ``skip = "reason"``.

    Raises:
        WrpError: (exit 2) The file is not valid TOML (the message names the
            line), has an unknown table or key, or a value of the wrong type;
            or this Python has no ``tomllib`` (3.10).
    """
    path = Path(path)
    try:
        import tomllib  # noqa: PLC0415
    except ImportError:  # Python 3.10
        raise WrpError(f"cannot read {path}: reading {SUITE_FILE} needs Python 3.11 or newer (the standard "
                       f"library's tomllib); this is Python {sys.version.split()[0]}",
                       hint=f"Run wrp regress with Python 3.11+, or remove {SUITE_FILE} to use the defaults.") \
            from None
    from ...file_reads import read_file  # noqa: PLC0415

    raw = bytes(read_file(path, "suite file"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise usage_error(WrpError(f"{path}: not UTF-8 text (byte {e.start})")) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise usage_error(WrpError(f"{path}: not valid TOML: {e}",
                                   hint="Fix the line named; see docs/regress.md for an example.")) from None
    defaults, patterns = {}, []
    for key, value in data.items():
        if key == "defaults" and isinstance(value, dict):
            defaults = _check_table(path, text, value, "[defaults]")
        elif key == "cases" and isinstance(value, dict):
            for pattern, table in value.items():
                if not isinstance(table, dict):
                    raise usage_error(_config_error(path, text, f"cases.{pattern} must be a table "
                                                    f'([cases."{pattern}"])', pattern))
                patterns.append((pattern, _check_table(path, text, table, f'[cases."{pattern}"]')))
        else:
            raise usage_error(_config_error(path, text, f"unknown table or key {key!r} (known: [defaults], "
                                            '[cases."PATTERN"])', key))
    return defaults, patterns


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


def discover(suite, *, keyword: Optional[str] = None, overrides: Optional[dict] = None) -> list:
    """Every case of a suite folder, in path order.

    Args:
        suite: The suite folder.
        keyword: Keep only cases whose name contains it, or matches it as a
            glob when it holds ``*``, ``?`` or ``[``.
        overrides: Settings given by the caller (``device``, ``timeout``,
            ``rtol``, ...): above the suite's ``[defaults]``, below a case's
            own entry.

    Returns:
        A list of :class:`Case`.

    Raises:
        WrpNotFoundError: The suite folder does not exist (exit 2).
        WrpError: (exit 2) It is not a folder, holds no capture (or none
            matches ``keyword``), names one case twice (``x.wrp`` and
            ``x.wrpk``), or its ``wrp-suite.toml`` is bad.
    """
    from ...io_errors import io_error  # noqa: PLC0415

    root = Path(suite)
    try:
        if not root.exists():
            raise WrpNotFoundError(f"suite {root} does not exist",
                                   hint="Pass a folder of captures (NAME.wrp or NAME.wrpk, with NAME_expected.npz).")
        if not root.is_dir():
            raise usage_error(WrpError(f"suite {root} is not a folder",
                                       hint="Pass the folder that holds the captures; `wrp replay FILE --check` "
                                            "checks one."))
        os.listdir(root)  # a folder this user may not read is an I/O error (exit 1), not an empty suite
        has_config = (root / SUITE_FILE).exists()
    except OSError as e:
        raise io_error(e, root, "read") from None
    defaults, patterns = ({}, [])
    if has_config:
        defaults, patterns = read_suite_config(root / SUITE_FILE)
    found = {}

    def unreadable(e: OSError):
        raise io_error(e, None, "read")

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        dirnames[:] = sorted(d for d in dirnames if not d.endswith("_modules") and not d.startswith("."))
        here = Path(dirpath)
        for fn in sorted(filenames):
            if not fn.endswith((".wrp", ".wrpk")):
                continue
            p = here / fn
            stem = fn[: -len(p.suffix)]
            name = (here.relative_to(root) / stem).as_posix()
            if name in found:
                raise usage_error(WrpError(f"case {name!r} is given twice: {found[name].capture.name} and {fn}",
                                           hint="Keep one of them (a .wrp and its bundle are the same capture)."))
            inputs = here / f"{stem}_inputs.npz"
            found[name] = Case(name, p, here / f"{stem}_modules" if p.suffix == ".wrp" else None,
                               inputs if inputs.exists() else None, here / f"{stem}_expected.npz")
    if not found:
        raise usage_error(WrpError(f"suite {root} holds no captures (NAME.wrp or NAME.wrpk, in it or below it)",
                                   hint="Write captures with wp.capture_save or wrpkit.save; the samples write "
                                        "NAME.wrp, NAME_inputs.npz and NAME_expected.npz."))
    cases = sorted(found.values(), key=lambda c: c.name)
    for c in cases:
        merged = dict(defaults)
        merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
        for pattern, table in patterns:
            if _matches(c.name, pattern):
                merged.update(table)
        c.settings = CaseSettings(**{**CaseSettings().__dict__, **merged})
    if keyword:
        globbed = any(ch in keyword for ch in "*?[")
        cases = [c for c in cases if (fnmatch.fnmatchcase(c.name, keyword) if globbed else keyword in c.name)]
        if not cases:
            raise usage_error(WrpError(f"no case of {root} matches -k {keyword!r}",
                                       hint="Case names are paths below the suite without the extension "
                                            "(`wrp regress SUITE --json` lists them)."))
    return cases


__all__ = ["discover", "read_suite_config", "usage_error", "Case", "CaseSettings", "SUITE_FILE", "DEFAULT_TIMEOUT",
           "CASE_KEYS"]
