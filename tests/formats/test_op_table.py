"""The op table (``REGIONS`` on each op class of ``wrpkit.ops``) is complete for every op type.

Every tool takes what an op reads and writes from this table (through
``wrpkit.checks.effects``), so an op type that lacks any part of its entry
must fail here, not silently record nothing in ``wrp trace``.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from wrpkit import model as m
from wrpkit.formats.wrp1_layout import LAYOUT_18
from wrpkit.records import record

#: Record fields that the WRP1 record derives from the model's variable parts (their lengths and counts).
_DERIVED = {m.OpType.MEMCPY_H2D: {"size"}, m.OpType.MEMTILE: {"srcsize"},
            m.OpType.IF: {"branch_a_size", "branch_a_op_count", "branch_b_size", "branch_b_op_count"},
            m.OpType.WHILE: {"branch_a_size", "branch_a_op_count", "branch_b_size", "branch_b_op_count"}}
#: Model fields that follow the fixed record (inline bytes, nested bodies, the transpose tail).
_TRAILING = {m.OpType.MEMCPY_H2D: {"data"}, m.OpType.MEMTILE: {"value"}, m.OpType.IF: {"then_ops", "else_ops"},
             m.OpType.WHILE: {"body"}, m.OpType.BSR_TRANSPOSE: {"padded_tail"}}
from proc_helpers import ROOT


def entry_problems(cls) -> list:
    """What is missing or wrong in one op class's table entry (empty: complete)."""
    problems = []
    if "REGIONS" not in vars(cls) or cls.REGIONS is None:
        return [f"{cls.__name__} declares no REGIONS"]
    fields = m.op_fields(cls)
    region_fields = [f for f in fields if f.endswith("region_id")]
    declared = [r.region for r in cls.REGIONS]
    if cls.ARGUMENT_REGIONS:
        if cls.REGIONS:
            problems.append(f"{cls.__name__} takes regions from its arguments and declares REGIONS too")
    for f in region_fields:
        if declared.count(f) != 1:
            problems.append(f"{cls.__name__}.{f} is a region reference listed {declared.count(f)} times in REGIONS")
    for r in cls.REGIONS:
        if not isinstance(r, m.RegionRef):
            problems.append(f"{cls.__name__}: {r!r} is not a RegionRef")
            continue
        if r.region not in fields:
            problems.append(f"{cls.__name__}: {r.role} names a region field {r.region!r} the record lacks")
        if r.offset is not None and r.offset not in fields:
            problems.append(f"{cls.__name__}: {r.role} names an offset field {r.offset!r} the record lacks")
        if not r.region.startswith(r.role):
            problems.append(f"{cls.__name__}: role {r.role!r} is not the prefix of {r.region!r}")
        if not isinstance(r.length, m.Length):
            problems.append(f"{cls.__name__}: {r.role} has no byte length of the vocabulary (a Length)")
        if not callable(r.access) and r.access not in m.ACCESS_MODES:
            problems.append(f"{cls.__name__}: {r.role} has access {r.access!r}")
    layout = LAYOUT_18.launch if cls.ARGUMENT_REGIONS else LAYOUT_18.ops.get(cls.op_type)
    if layout is None:
        problems.append(f"{cls.__name__} has no WRP1 record layout")
    else:
        for r in cls.REGIONS:
            for f in (r.region, r.offset):
                if f is not None and f not in layout.content:
                    problems.append(f"{cls.__name__}: {f} is not a field of its WRP1 record")
    return problems


@pytest.mark.parametrize("op_type", [t for t in m.OpType if t != m.OpType.MEMCPY_D2H], ids=lambda t: t.name)
def test_every_op_type_has_a_complete_entry(op_type):
    cls = m.OP_CLASSES.get(op_type)
    assert cls is not None, f"{op_type.name} has no model class"
    assert entry_problems(cls) == []


def test_record_fields_are_the_layout_fields():
    """The model's fields of each op are its WRP1 record's (less derived counts), so one list serves both."""
    for t, cls in m.OP_CLASSES.items():
        if cls.ARGUMENT_REGIONS:
            continue
        layout = LAYOUT_18.ops[t]
        record = [f for f in layout.content if f not in _DERIVED.get(t, ())]
        model = [f for f in m.op_fields(cls) if f not in _TRAILING.get(t, ())]
        assert model == record, t.name


def test_the_check_fails_on_an_incomplete_entry():
    """The completeness check is not vacuous: a class missing REGIONS, or one region field, fails it."""

    @record(slots=True)  # as every op class is made
    class Bare(m.Op):
        op_type: ClassVar[m.OpType] = m.OpType.MEMSET
        region_id: int = 0

    assert entry_problems(Bare) == ["Bare declares no REGIONS"]

    @record(slots=True)  # as every op class is made
    class Partial(m.Op):
        op_type: ClassVar[m.OpType] = m.OpType.MEMCPY_D2D
        REGIONS: ClassVar[tuple] = (m.RegionRef("dst", "dst_region_id", "dst_offset", m.Fixed(1), "write"),)
        dst_region_id: int = 0
        src_region_id: int = 0
        dst_offset: int = 0
        src_offset: int = 0

    assert any("src_region_id" in p for p in entry_problems(Partial))


def test_op_table_lists_reads_and_writes_by_field():
    table = m.op_table()
    assert set(table) == set(m.OP_CLASSES)
    assert table[m.OpType.MEMCPY_D2D]["reads"] == ["src_region_id"]
    assert table[m.OpType.MEMCPY_D2D]["writes"] == ["dst_region_id"]
    assert table[m.OpType.WHILE]["reads"] == ["cond_region_id"] and table[m.OpType.WHILE]["writes"] == []
    assert table[m.OpType.REDUCTION]["writes"] == ["output_region_id"]
    assert "input_a_region_id" in table[m.OpType.REDUCTION]["reads"]
    assert set(table[m.OpType.BSR_TRANSPOSE]["reads"]) == {"bsr_offsets_region_id", "bsr_row_counts_region_id",
                                                           "bsr_columns_region_id"}
    assert table[m.OpType.HASH_GRID_UPDATE]["writes"] == []
    assert table[m.OpType.KERNEL_LAUNCH]["argument_regions"] is True


# -- The C++ op lists are generated from the op table -----------------------------------------------

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
#: The C++ headers generated from the op table, and the generator of each.
_GENERATED_HEADERS = {"native/src/wrp1_layouts.h": "gen_layout", "native/src/wrpk_op_writer.h": "gen_op_writer"}


def _needs_checkout():
    if not (ROOT / "native" / "src").is_dir() or not (ROOT / "tools").is_dir():
        pytest.skip("needs the source checkout")


@pytest.mark.parametrize("rel", sorted(_GENERATED_HEADERS))
def test_committed_op_headers_are_what_the_generators_write_now(rel):
    """The op enum, the op names and the bundle reader's record writer, regenerated in memory, are
    the committed headers byte for byte."""
    _needs_checkout()
    import importlib  # noqa: PLC0415

    gen = importlib.import_module(_GENERATED_HEADERS[rel])
    assert (ROOT / rel).read_text() == gen.render(), f"{rel} drifted: run python tools/{gen.__name__}.py"


def test_op_writer_check_mode_fails_on_a_stale_header(tmp_path):
    _needs_checkout()
    cmd = [sys.executable, str(ROOT / "tools" / "gen_op_writer.py")]
    fresh, stale = tmp_path / "fresh.h", tmp_path / "stale.h"
    assert subprocess.run(cmd + ["--out", str(fresh)], capture_output=True).returncode == 0
    stale.write_text(fresh.read_text().replace("w.zeros(4);", "w.zeros(2);", 1))
    assert subprocess.run(cmd + ["--check", "--out", str(fresh)], capture_output=True).returncode == 0
    res = subprocess.run(cmd + ["--check", "--out", str(stale)], capture_output=True, text=True)
    assert res.returncode == 1 and "stale" in res.stderr


def test_the_generated_lists_cover_every_op_type():
    """Every op type is in the C++ enum and names, and every modelled one has a case in the writer
    with each of its record's content fields written (or derived from its variable part)."""
    _needs_checkout()
    import gen_layout  # noqa: PLC0415

    layouts = (ROOT / "native/src/wrp1_layouts.h").read_text()
    writer = (ROOT / "native/src/wrpk_op_writer.h").read_text()
    for t in m.OpType:
        enum = gen_layout.op_enum_name(t)
        assert f"    {enum} = {int(t)}," in layouts and f'"{t.name}"' in layouts, t.name
        cls = m.OP_CLASSES.get(t)
        if cls is None:
            continue
        case = writer[writer.index(f"case {enum}:"):]
        case = case[:case.index("\n        case ") if "\n        case " in case else len(case)]
        for f in (LAYOUT_18.ops[t].content if t in LAYOUT_18.ops else ()):
            assert f"o->{f}()" in case or f"// {f}:" in case or f"VT_{f.upper()}" in case, (t.name, f)


# -- docs/architecture.md "Adding an op type" lists exactly the places that name an op type ---------

#: The kinds of place the list may have, in its order: adding an op type touches nothing else.
_KINDS = ("The op table", "The schema", "Its meaning")
#: Folders whose every file is generated (flatc's output).
_GENERATED_DIRS = ("wrpkit/formats/fbs/",)
#: How a generated file says so in its first lines ("GENERATED by tools/x.py ...; DO NOT EDIT").
_GENERATED_MARK = re.compile(r"\bgenerated\b.*\bdo not edit\b", re.IGNORECASE)
#: Files that name op types without being a place to add one: capture scripts for fixtures, the
#: generator's own comments in what it writes, the C API's documentation of op names as examples,
#: and the op slot's writer, which writes MEMTILE records before ops of every type, whatever they are.
_NOT_PLACES = {"tools/legacy_programs.py", "tools/make_legacy_fixtures.py", "tools/gen_layout.py",
               "native/include/wrp_replay.h", "native/src/wrp1_op_slots.cpp"}
#: Op types every walker of the stream names (launches, nested bodies): not added per op type.
_STRUCTURAL = {m.OpType.KERNEL_LAUNCH, m.OpType.IF, m.OpType.WHILE}
#: What is searched: the Python package, the C++ sources, the schema and its documents, the tools.
_SOURCES = ("wrpkit/**/*.py", "wrpkit/**/*.js", "native/**/*.cpp", "native/**/*.h", "schema/*.fbs", "schema/*.md",
            "tools/*.py")


def _generated(rel: str, text: str) -> bool:
    return rel.startswith(_GENERATED_DIRS) or any(_GENERATED_MARK.search(x) for x in text.splitlines()[:10])


def listed_places(always: bool = False) -> dict:
    """``{kind: [paths]}`` of the "Adding an op type" list of docs/architecture.md: one numbered item
    per kind of place, its bold title the kind, the paths its back-quoted names with a slash.
    ``always``: only the places every op type touches (those before an item's first "Only if")."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    start = text.index("**Adding an op type**")
    ends = [i for i in (text.find("\n```", start), text.find("\n#", start)) if i >= 0]
    block = text[start:min(ends) if ends else len(text)]
    items = re.split(r"\n\d+\. ", block)[1:]
    out = {}
    for item in items:
        title = re.match(r"\*\*([^*]+)\*\*", item)
        assert title, f"an item of the list has no bold kind: {item[:60]!r}"
        if always:
            item = item.split("Only if")[0]
        out[title.group(1).rstrip(":")] = [p for p in re.findall(r"`([\w./-]+)`", item)
                                            if "/" in p and not p.endswith("/")]
    return out


def naming_files(files: dict) -> dict:
    """``{op type: {hand-written file that names it}}``: its name (``MEMSET``), its class
    (``Memset``), its C++ enumerator (``kOpMemset``) or a per-op function name (``op_memset``)."""
    import gen_layout  # noqa: PLC0415

    out = {}
    for t, cls in m.OP_CLASSES.items():
        if t in _STRUCTURAL:
            continue
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        pat = re.compile(rf"\b({t.name}|{cls.__name__}|op_{snake}|{gen_layout.op_enum_name(t)})\b")
        out[t] = {rel for rel, text in files.items() if pat.search(text)}
    return out


def code_only(rel: str, text: str) -> str:
    """``text`` without its comments and docstrings: a file that only *mentions* an op type (an
    example in a comment) is no place to add one, and wording a comment differently must not change
    the count."""
    if rel.endswith(".py"):
        import ast  # noqa: PLC0415
        import io  # noqa: PLC0415
        import tokenize  # noqa: PLC0415

        lines = text.splitlines(keepends=True)
        drop = set()  # (row, col) spans to blank: comments, and every docstring
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                drop.add((tok.start, tok.end))
        for node in ast.walk(ast.parse(text)):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                d = body[0].value
                drop.add(((d.lineno, d.col_offset), (d.end_lineno, d.end_col_offset)))
        for (r0, c0), (r1, c1) in sorted(drop, reverse=True):
            if r0 == r1:
                lines[r0 - 1] = lines[r0 - 1][:c0] + lines[r0 - 1][c1:]
            else:
                lines[r0 - 1] = lines[r0 - 1][:c0] + "\n"
                for r in range(r0, r1 - 1):
                    lines[r] = "\n"
                lines[r1 - 1] = lines[r1 - 1][c1:]
        return "".join(lines)
    if rel.endswith((".cpp", ".h", ".js", ".fbs")):
        # block comments, then line comments outside string literals
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        return re.sub(r'^((?:[^"/\n]|"(?:\\.|[^"\\\n])*"|/(?!/))*)//[^\n]*', r"\1", text, flags=re.M)
    return text  # a document (schema/*.md): every mention is the place


def hand_written_sources() -> dict:
    files = {}
    for pattern in _SOURCES:
        for p in ROOT.glob(pattern):
            rel = p.relative_to(ROOT).as_posix()
            if "__pycache__" in p.parts or rel in _NOT_PLACES:
                continue
            text = p.read_text(errors="replace")
            if not _generated(rel, text):
                files[rel] = code_only(rel, text)
    return files


def unlisted(named: dict, places: dict) -> dict:
    """``{op type: files that name it and the list lacks}`` (empty: the list is complete)."""
    every = {p for paths in places.values() for p in paths}
    return {t.name: sorted(files - every) for t, files in named.items() if files - every}


@pytest.mark.slow  # 4 s: reads every hand-written file for every op type
def test_adding_an_op_type_touches_only_the_listed_places():
    """Counted, not assumed: for every op type, the hand-written files that name it are all in the
    list, the list has only the three kinds of place, and no C++ file but the op's meaning names it
    (the C++ enum, names and record writer are generated)."""
    _needs_checkout()
    places = listed_places()
    assert tuple(places) == _KINDS, f"the list's kinds of place are {tuple(places)}, not {_KINDS}"
    for p in (p for paths in places.values() for p in paths):
        assert (ROOT / p).exists(), f"docs/architecture.md names {p}, which does not exist"
    named = naming_files(hand_written_sources())
    assert unlisted(named, places) == {}, "files name an op type but docs/architecture.md's list lacks them"
    meaning = set(places["Its meaning"])
    cxx = {f for files in named.values() for f in files if f.startswith("native/")}
    assert cxx <= meaning, f"C++ files other than the op's meaning name op types: {sorted(cxx - meaning)}"
    # the counts: every op type is named in at most the listed hand-written places, and one with no
    # variable part, dtype, format difference or summary of its own in no more than those every op touches
    counts = {t.name: len(files) for t, files in named.items()}
    hand = {p for paths in places.values() for p in paths if not _generated(p, (ROOT / p).read_text())}
    always = {p for paths in listed_places(always=True).values() for p in paths} & hand
    assert max(counts.values()) <= len(hand), counts
    assert named[m.OpType.BVH_REFIT] <= always, sorted(named[m.OpType.BVH_REFIT] - always)
    assert min(counts.values()) <= len(always - {"wrpkit/checks/effects.py"}), counts
    # and every listed source is one (generated files, tools, tests and effects.py are named as context)
    used = {f for files in named.values() for f in files}
    context = {p for p in hand - used if not p.startswith(("tools/", "tests/", "docs/"))}
    assert context <= {"wrpkit/checks/effects.py"}, context


def test_the_count_is_not_vacuous():
    """A hand-written file whose code names an op type that the list lacks is found; one whose
    comments or docstrings only mention it is not (and rewording a comment changes nothing)."""
    _needs_checkout()  # the list is read from docs/architecture.md
    # The counter itself, on planted files only: that the real files are all listed is the test above.
    files = {}
    planted = {"native/src/new_hand_list.cpp": "case kOpMemset: return \"MEMSET\"; // a list by hand",
               "native/src/mentions.cpp": "// like a MEMSET, /* or a Memset */ this fills bytes\nint fill;",
               "wrpkit/elsewhere.py": '"""Fills bytes, as MEMSET does."""\n\n# a MEMSET-like fill\nx = "a"  # MEMSET\n',
               "wrpkit/names_one.py": 'def f():\n    """Doc."""\n    return OpType.MEMSET\n'}
    files.update({rel: code_only(rel, text) for rel, text in planted.items()})
    got = unlisted(naming_files(files), listed_places())
    assert got == {"MEMSET": ["native/src/new_hand_list.cpp", "wrpkit/names_one.py"]}
