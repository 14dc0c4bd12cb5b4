"""The op table (``REGIONS`` on each op class of ``wrpkit.model``) is complete for every op type.

Every tool takes what an op reads and writes from this table (through
``wrpkit.checks.effects``), so an op type that lacks any part of its entry
must fail here, not silently record nothing in ``wrp trace``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from wrpkit import model as m
from wrpkit.formats.wrp1_layout import LAYOUT_18

#: Record fields that the WRP1 record derives from the model's variable parts (their lengths and counts).
_DERIVED = {m.OpType.MEMCPY_H2D: {"size"}, m.OpType.MEMTILE: {"srcsize"},
            m.OpType.IF: {"branch_a_size", "branch_a_op_count", "branch_b_size", "branch_b_op_count"},
            m.OpType.WHILE: {"branch_a_size", "branch_a_op_count", "branch_b_size", "branch_b_op_count"}}
#: Model fields that follow the fixed record (inline bytes, nested bodies, the transpose tail).
_TRAILING = {m.OpType.MEMCPY_H2D: {"data"}, m.OpType.MEMTILE: {"value"}, m.OpType.IF: {"then_ops", "else_ops"},
             m.OpType.WHILE: {"body"}, m.OpType.BSR_TRANSPOSE: {"padded_tail"}}


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

    @dataclasses.dataclass(slots=True)
    class Bare(m.Op):
        op_type: ClassVar[m.OpType] = m.OpType.MEMSET
        region_id: int = 0

    assert entry_problems(Bare) == ["Bare declares no REGIONS"]

    @dataclasses.dataclass(slots=True)
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


# -- README "Adding an op type" lists exactly the places that name an op type ----------------------

import re  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: Generated from the listed sources (regenerated by the tools the README names).
_GENERATED = ("wrpkit/formats/fbs/", "native/src/wrp1_layouts.h", "wrpkit/formats/wrpk/schema_tables.py")
#: Files that name op types without being a place to add one: capture scripts for fixtures, the
#: generator's comments, and the C API's and error's documentation of op names as examples.
_NOT_PLACES = {"tools/legacy_programs.py", "tools/make_legacy_fixtures.py", "tools/gen_layout.py",
               "native/include/wrp_replay.h"}
#: Op types every walker of the stream names (launches, nested bodies): not added per op type.
_STRUCTURAL = {m.OpType.KERNEL_LAUNCH, m.OpType.IF, m.OpType.WHILE}


def _readme_places() -> set:
    # The list lives in the README or, once moved, in one page of docs/; it runs
    # from its bold title to the next code block or heading.
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        if "**Adding an op type**" in text:
            break
    start = text.index("**Adding an op type**")
    ends = [i for i in (text.find("\n```", start), text.find("\n#", start)) if i >= 0]
    block = text[start:min(ends) if ends else len(text)]
    return {p for p in re.findall(r"`([\w./-]+)`", block) if "/" in p and not p.endswith("/")}


def _source_files():
    for pattern in ("wrpkit/**/*.py", "wrpkit/**/*.js", "native/**/*.cpp", "native/**/*.h", "schema/*.fbs",
                    "schema/*.md", "tools/*.py"):
        for p in ROOT.glob(pattern):
            rel = p.relative_to(ROOT).as_posix()
            if not rel.startswith(_GENERATED) and rel not in _NOT_PLACES:
                yield rel, p


def test_readme_lists_exactly_the_places_that_name_an_op_type():
    if not (ROOT / "README.md").is_file() or not (ROOT / "native").is_dir():
        pytest.skip("needs the source checkout")
    places = _readme_places()
    for p in places:
        assert (ROOT / p).exists(), f"README names {p}, which does not exist"
    files = {rel: p.read_text(errors="replace") for rel, p in _source_files()}
    named = set()
    for t, cls in m.OP_CLASSES.items():
        if t in _STRUCTURAL:
            continue
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        # the C++ enum spells them kOpRunlengthEncode
        pat = re.compile(rf"\b({t.name}|{cls.__name__}|op_{snake}|kOp{cls.__name__})\b")
        for rel, text in files.items():
            if pat.search(text):
                named.add(rel)
    assert named - places == set(), "files name an op type but README's list lacks them"
    # and every listed source is one (tests, docs, tools and generated files are named only as context)
    unused = {p for p in places if p not in named and not p.startswith(("tests/", "docs/", "tools/") + _GENERATED)}
    assert unused <= {"wrpkit/checks/effects.py", "schema/WRPK-FORMAT.md"}, unused
