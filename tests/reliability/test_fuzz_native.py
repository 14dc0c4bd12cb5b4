"""Coverage-guided fuzzing of the C++ decoders (native/fuzz) with libFuzzer, ASan and UBSan.

Three targets are built with clang (``-DWRP_BUILD_FUZZERS=ON``):

* ``fuzz_wrp1``: the input is a ``.wrp``; the WRP1 parser and validator run on it.
* ``fuzz_wrpk``: the input is a ``.wrpk``; header, manifest checksum and
  FlatBuffer verification, blob layout and checksums, the rebuilt WRP1 image's
  validation and the module ELF checks run on it.
* ``fuzz_signature``: the input is a signature of a fixed small capture
  (schema/SIGNATURE-RULES.md): its first byte says whether the rest is a
  bundle as it is (0) or a statement the target signs itself with its trusted
  key (1) or certificate (2), so that mutations reach every check.

The first two open inputs with ``validate_only``; all are linked against a stub
of the Warp runtime that aborts if entered: they never call into Warp.  The
decoders' targets are seeded with real captures of ``tests/programs.py``, the
hostile variants of ``tests/hostile.py`` and their ``.wrpk`` bundles, written
to a temporary corpus; the signature target with bundles and statements made
here (:func:`write_signature_seeds`).  Each target runs for a few seconds here (``WRP_FUZZ_SECONDS``);
``bench/FUZZING.md`` records longer runs.  Regression inputs (small byte
strings built in the test: every crasher found, and the hazards the decoder
was built against) are fed to the fuzz binaries one at a time.

Without clang++ or libFuzzer the tests skip, saying why.  To write a seed
corpus for a long run by hand::

    python tests/reliability/test_fuzz_native.py SEED_DIR   # writes SEED_DIR/wrp1, SEED_DIR/wrpk and SEED_DIR/signature
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: the helpers

from conftest import cmake_python_args  # noqa: E402
from wrpk_manifests import misaligned_annotations, program_manifest, shared_launch, with_annotations, wrap_manifest  # noqa: E402
from proc_helpers import ROOT

pytestmark = pytest.mark.slow  # builds the libFuzzer targets with clang and fuzzes

FUZZ_SECONDS = int(os.environ.get("WRP_FUZZ_SECONDS", "5"))


def find_clang() -> str | None:
    for name in ("clang++", *(f"clang++-{v}" for v in range(20, 12, -1))):
        path = shutil.which(name)
        if path:
            return path
    return None


# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fuzzers(tmp_path_factory) -> dict:
    """``{"wrp1": Path, "wrpk": Path, "signature": Path}`` of the fuzz binaries, built with clang into a
    temporary directory."""
    cmake = shutil.which("cmake")
    if not cmake:
        pytest.skip("cmake is not installed")
    clang = find_clang()
    if not clang:
        pytest.skip("clang++ is not installed: libFuzzer needs clang (Debian: apt-get install clang-14 "
                    "libclang-rt-14-dev)")
    bdir = tmp_path_factory.mktemp("fuzz-build")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = subprocess.run([cmake, "-S", str(ROOT), "-B", str(bdir), *gen, *cmake_python_args(), f"-DCMAKE_CXX_COMPILER={clang}",
                                "-DCMAKE_BUILD_TYPE=Release", "-DWRP_BUILD_FUZZERS=ON"],
                               capture_output=True, text=True)
    if configure.returncode != 0:
        pytest.fail(f"cmake configure failed:\n{configure.stdout[-3000:]}\n{configure.stderr[-3000:]}")
    if "no fuzz targets are built" in configure.stderr:
        reason = " ".join(configure.stderr.split("no fuzz targets are built")[0].split()[-40:])
        pytest.skip(f"libFuzzer is not usable with {clang}: {reason}")
    build = subprocess.run([cmake, "--build", str(bdir), "--parallel", str(os.cpu_count() or 2), "--target",
                            "fuzz_wrp1", "fuzz_wrpk", "fuzz_signature"], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"building the fuzz targets failed:\n{build.stdout[-4000:]}\n{build.stderr[-4000:]}")
    return {name: bdir / "native" / "fuzz" / f"fuzz_{name}" for name in ("wrp1", "wrpk", "signature")}


# ---------------------------------------------------------------------------
# Seeds
# ---------------------------------------------------------------------------


def _capture_annotated(out: Path) -> dict:
    """Captures saved with wrpkit's own writer, which adds the ANNOTATIONS section (typed signatures,
    kernel signatures, module digests) that stock captures lack."""
    import programs  # noqa: PLC0415
    import warp as wp  # noqa: PLC0415

    try:
        from wrpkit.run.capture import recording  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - another engineer's module may be mid-change
        return {}
    caps = {}
    for name, prog in programs.PROGRAMS.items():
        try:
            arrays = prog.make_arrays("cpu")
            wp.capture_begin(device="cpu", apic=True)
            try:
                prog.step(arrays)
            finally:
                graph = wp.capture_end(device="cpu")
            path = out / f"{name}.wrp"
            recording.save(graph, path, inputs={n: arrays[n] for n in prog.inputs},
                           outputs={n: arrays[n] for n in prog.outputs})
            caps[f"annotated_{name}"] = path
        except Exception:  # noqa: BLE001 - a program wrpkit's writer refuses is simply not a seed
            continue
    return caps


def _deep_bundle(base_prog, depth: int) -> bytes:
    """A bundle whose ops sit inside ``depth`` nested IFs (wrpkit's decoder stops at 64, so build it directly)."""
    from wrpkit import model as m  # noqa: PLC0415
    from wrpkit.formats.wrpk.builder import encode_wrpk  # noqa: PLC0415

    ops = list(base_prog.ops)
    for _ in range(depth):
        ops = [m.If(base_prog.regions[0].region_id, 0, ops, [])]
    base_prog.ops = ops
    return encode_wrpk(base_prog)


def write_seeds(out: Path, work: Path) -> tuple:
    """Write seed inputs: ``out/wrp1/*`` (.wrp bytes) and ``out/wrpk/*`` (.wrpk bytes).

    Seeds are every capture of tests/programs.py (saved by stock Warp and by wrpkit's writer, which adds
    annotations), its .wrpk with and without module binaries, the captures of older Warp releases
    (tests/fixtures/legacy/), their bundles and their per-format parity variants, the
    hostile variants of tests/hostile.py and the bundles of those wrpkit can convert, and a few
    hand-made bundles (deep nesting).  Returns the two folders.
    """
    import hostile  # noqa: PLC0415
    from wrpkit.formats.container import open_capture  # noqa: PLC0415
    from wrpkit.errors import WrpError  # noqa: PLC0415
    from wrpkit.formats.wrp1 import decode_wrp1  # noqa: PLC0415
    from wrpkit.formats.wrpk.builder import encode_wrpk  # noqa: PLC0415

    d1, dk = out / "wrp1", out / "wrpk"
    d1.mkdir(parents=True, exist_ok=True)
    dk.mkdir(parents=True, exist_ok=True)
    import programs  # noqa: PLC0415

    caps = programs.cached_captures()
    (work / "annotated").mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        caps.update(_capture_annotated(work / "annotated"))

    def seed(folder: Path, data: bytes):
        (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)

    def bundle(path: Path):
        try:
            with open_capture(path) as cap:
                mods = {k: bytes(v) for k, v in cap.module_files().items()}
                prog = decode_wrp1(path.read_bytes())
            return encode_wrpk(prog, mods), encode_wrpk(prog)  # with and without module binaries
        except (WrpError, OSError, ValueError):
            return None

    for name, path in caps.items():
        seed(d1, path.read_bytes())
        got = bundle(path)
        if got:
            for data in got:
                seed(dk, data)
    # Captures of Warp 1.13-1.18 (formats 3, 10, 14-16, tests/fixtures/legacy/), their bundles, and the
    # variants of tests/parity_cases.py that break one rule of one format.
    import parity_cases  # noqa: PLC0415

    for path in sorted(parity_cases.LEGACY_ROOT.glob("*/*.wrp")):
        seed(d1, path.read_bytes())
        for data in bundle(path) or ():
            seed(dk, data)
    for i, case in enumerate(parity_cases.LEGACY_CASES):
        path = parity_cases.build(case, work / "legacy" / str(i))
        seed(dk if path.suffix == ".wrpk" else d1, path.read_bytes())
    base = caps["views"]
    for depth in (64, 65, 66, 140):
        seed(dk, _deep_bundle(decode_wrp1(base.read_bytes()), depth))
    for v in hostile.generate(caps["tape"], work / "hostile"):
        if v.path.is_symlink() or not v.path.is_file():
            continue
        data = v.path.read_bytes()
        if 0 < len(data) <= 1 << 20:
            seed(d1, data)
        got = bundle(v.path)
        if got:
            seed(dk, got[1])
    return d1, dk


@pytest.fixture(scope="session")
def seeds(tmp_path_factory) -> tuple:
    root = tmp_path_factory.mktemp("fuzz-seeds")
    return write_seeds(root / "seeds", root / "work")


# The capture fuzz_signature signs (its kFiles, byte for byte): resource name -> content.
SIGNATURE_FUZZ_FILES = {"cap.wrp": b"WRP1 signed fuzz capture\n", "cap_modules/a.o": b"module a\n",
                        "cap_modules/b.o": b"module b\n"}


def fuzz_statement(files: dict = None, subject: str = None, **extra) -> bytes:
    """An in-toto statement of model-signing listing ``files`` (resource name -> content)."""
    files = SIGNATURE_FUZZ_FILES if files is None else files
    resources = [{"algorithm": "sha256", "name": n, "digest": hashlib.sha256(b).hexdigest()} for n, b in files.items()]
    digest = subject or hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources)).hexdigest()
    import json  # noqa: PLC0415

    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "cap", "digest": {"sha256": digest}}],
                 "predicateType": "https://model_signing/signature/v1.0",
                 "predicate": {"resources": resources, "serialization": {"ignore_paths": [], "hash_type": "sha256",
                                                                         "method": "files", "allow_symlinks": False}}}
    statement.update(extra)
    return json.dumps(statement, indent=2).encode()


def untrusted_bundle(statement: bytes, certificate: bool = False) -> bytes:
    """A model-signing bundle of ``statement`` signed with a key made here (no fuzz target trusts it)."""
    import base64  # noqa: PLC0415
    import datetime  # noqa: PLC0415
    import json  # noqa: PLC0415

    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    ptype = b"application/vnd.in-toto+json"
    pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(statement), statement)
    sig = key.sign(pae, ec.ECDSA(hashes.SHA256()))
    if certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fuzz seed")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), True)
                .sign(key, hashes.SHA256()))
        der = cert.public_bytes(serialization.Encoding.DER)
        material = {"x509CertificateChain": {"certificates": [{"rawBytes": base64.b64encode(der).decode()}]}}
    else:
        pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        material = {"publicKey": {"hint": hashlib.sha256(pem).hexdigest()}, "tlogEntries": []}
    return json.dumps({"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "verificationMaterial": material,
                       "dsseEnvelope": {"payload": base64.b64encode(statement).decode(),
                                        "payloadType": ptype.decode(),
                                        "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}]}}).encode()


def write_signature_seeds(out: Path) -> Path:
    """Seeds of fuzz_signature in ``out/signature``: bundles as they are (first byte 0) and statements the
    target signs (1: with its key, 2: with its certificate), good ones and one per verdict of the rules."""
    folder = out / "signature"
    folder.mkdir(parents=True, exist_ok=True)
    good = fuzz_statement()
    without_b = {k: v for k, v in SIGNATURE_FUZZ_FILES.items() if k != "cap_modules/b.o"}
    statements = [
        good,
        fuzz_statement(without_b),                                                # added after signing
        fuzz_statement({**SIGNATURE_FUZZ_FILES, "cap_modules/c.o": b"c"}),       # removed after signing
        fuzz_statement({**SIGNATURE_FUZZ_FILES, "cap.wrp": b"other"}),           # changed after signing
        fuzz_statement({k: v for k, v in SIGNATURE_FUZZ_FILES.items() if k != "cap.wrp"}),  # not covered
        fuzz_statement(subject="0" * 64),                                        # malformed: subject digest
        fuzz_statement({**SIGNATURE_FUZZ_FILES, "other/../x": b"x"}),            # malformed: a name
        fuzz_statement(_type="https://in-toto.io/Statement/v0.1"),
    ]
    seeds = [bytes([mode]) + st for st in statements for mode in (1, 2)]
    seeds += [b"\0" + untrusted_bundle(good), b"\0" + untrusted_bundle(good, certificate=True),
              b"\0" + untrusted_bundle(good)[:200], b"\0{}", b"\0" + b"[" * 2000]
    for data in seeds:
        (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
    return folder


@pytest.fixture(scope="session")
def signature_seeds(tmp_path_factory) -> Path:
    return write_signature_seeds(tmp_path_factory.mktemp("fuzz-signature-seeds"))


# ---------------------------------------------------------------------------
# Short fuzzing runs
# ---------------------------------------------------------------------------


def run_fuzzer(exe: Path, args: list, timeout: float) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:symbolize=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, errors="replace",
                          timeout=timeout, env=env)


@pytest.mark.parametrize("target", ["wrp1", "wrpk", "signature"])
def test_fuzz_target_runs_without_crashing(fuzzers, request, tmp_path, target):
    if target == "signature":
        seed_dir = request.getfixturevalue("signature_seeds")
    else:
        seed_dir = request.getfixturevalue("seeds")[0 if target == "wrp1" else 1]
    assert len(list(seed_dir.iterdir())) >= 10
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    res = run_fuzzer(fuzzers[target], [f"-max_total_time={FUZZ_SECONDS}", "-timeout=20", "-rss_limit_mb=2048",
                                       "-print_final_stats=1", f"-artifact_prefix={artifacts}/", corpus, seed_dir],
                     timeout=FUZZ_SECONDS * 4 + 120)
    tail = res.stderr[-6000:]
    assert res.returncode == 0, f"fuzz_{target} found a crash (artifacts in {artifacts}):\n{tail}"
    assert not list(artifacts.iterdir()), tail
    assert "ERROR: AddressSanitizer" not in res.stderr and "runtime error:" not in res.stderr, tail
    execs = re.search(r"stat::number_of_executed_units:\s*(\d+)", res.stderr)
    assert execs and int(execs.group(1)) > len(list(seed_dir.iterdir())), tail


def test_fuzz_targets_never_load_warp(fuzzers):
    """The fuzz binaries link no Warp runtime: the stub aborts, and no warp.so is named anywhere."""
    for exe in fuzzers.values():
        raw = exe.read_bytes()
        assert b"the Warp runtime was entered" in raw
        assert b"warp-clang.so" not in raw and b"warp.so" not in raw


# ---------------------------------------------------------------------------
# Regression inputs
#
# Every crasher the fuzzers found (bench/FUZZING.md) is rebuilt here as a
# small byte string, together with the hazards the .wrpk decoder was built
# against (a naive decoder crashes, reads out of bounds or allocates without
# limit on them).  Each is fed to its fuzz binary (which must run it cleanly
# under ASan + UBSan) with WRP_FUZZ_VERBOSE=1, and the library's verdict is
# checked; tests/native/test_native_annotations.py also feeds the crasher to wrp-replay.
# ---------------------------------------------------------------------------


def _memset(op_type=5, with_table=True):
    def build(b):
        table = None
        if with_table:
            b.StartObject(4)
            b.PrependInt32Slot(0, 1, 0)
            b.PrependUint64Slot(3, 4, 0)
            table = b.EndObject()
        b.StartObject(2)
        b.PrependUint8Slot(0, op_type, 0)
        if table is not None:
            b.PrependUOffsetTRelativeSlot(1, table, 0)
        return b.EndObject()
    return build


def _region(region_id=1, size=16, has_data=0):
    def build(b):
        b.StartObject(5)
        b.PrependUint64Slot(2, size, 0)
        b.PrependUint32Slot(0, region_id, 0)
        b.PrependUint8Slot(3, has_data, 0)
        return b.EndObject()
    return build


def regression_inputs(base_wrp: bytes, binding: str) -> dict:
    """``{name: (target, bytes, expected substring of the library's message)}``."""
    ok_region = [_region()]
    valid = wrap_manifest(program_manifest(ops=[_memset()], regions=ok_region))
    out = {
        # FOUND BY fuzz_wrp1 (bench/FUZZING.md): an ANNOTATIONS section whose int64 shape/strides
        # vectors are misaligned was read in place by Vector<int64_t>::Get (UBSan: load of misaligned
        # address).  Fixed in annotations.cpp: refused, as wrpkit's own reader does.
        "misaligned_int64_vectors": ("wrp1", with_annotations(base_wrp, misaligned_annotations(binding)),
                                     "not 8-byte aligned"),
        # The same annotations, properly aligned, are accepted (the shift is what breaks them): the
        # whole file validates and only then is the module file, which fuzz_wrp1 never gives, missing.
        "aligned_int64_vectors": ("wrp1", with_annotations(base_wrp, _aligned(misaligned_annotations(binding))),
                                  "was not provided"),
        # Sanity: a minimal valid bundle (one MEMSET on a 16-byte region) is accepted.
        "minimal_valid_bundle": ("wrpk", valid, "ok"),
        # A union member without its table: the generated Verifier accepts it (a NULL
        # pointer is "absent"); dereferencing it would crash.
        "op_without_table": ("wrpk",
                             wrap_manifest(program_manifest(ops=[_memset(with_table=False)], regions=ok_region)),
                             "has no table"),
        # Union types the generated Verifier lets through: NONE, reserved 3, unknown 200.
        "op_type_none": ("wrpk", wrap_manifest(program_manifest(ops=[_memset(op_type=0, with_table=False)])),
                         "is NONE"),
        "op_type_reserved": ("wrpk", wrap_manifest(program_manifest(ops=[_memset(op_type=3)])), "reserved by Warp"),
        "op_type_unknown": ("wrpk", wrap_manifest(program_manifest(ops=[_memset(op_type=200)])), "unknown"),
        # A boolean stored as 2 (the Verifier does not check bool values).
        "bool_is_2": ("wrpk", wrap_manifest(program_manifest(regions=[_region(has_data=2)])), "boolean must be 0 or 1"),
        # 12000 references to one 64 KiB launch: ~790 MB of WRP1 records from a 112 KB file.
        "shared_table_expansion": ("wrpk", wrap_manifest(program_manifest(ops=[shared_launch], op_count=12000)),
                                   "would exceed"),
        # Header lies: manifest past the end, blob area size wrapping around 2^64.
        "manifest_past_end": ("wrpk", valid[:24] + struct.pack("<QQ", 1 << 30, (1 << 30) + 128) + valid[40:],
                              "truncated"),
        "blob_area_wraps": ("wrpk", valid[:40] + struct.pack("<Q", 2**64 - 64) + valid[48:], "blob_area_size"),
        "magic_only": ("wrpk", b"WRPK", "too small"),
        "text_mode_magic": ("wrpk", b"WRPK\n\x1a\n" + valid[8:], "text-mode"),
        # Manifest of the wrong root type's identifier and a zero root offset.
        "root_offset_zero": ("wrpk", wrap_manifest(bytes(4) + b"WRPK"), "failed verification"),
    }
    return out


def _aligned(shifted: bytes) -> bytes:
    """Undo :func:`misaligned_annotations`'s shift (the control case)."""
    root = struct.unpack_from("<I", shifted, 0)[0]
    return struct.pack("<I", root - 4) + shifted[4:8] + shifted[12:]


@pytest.fixture(scope="session")
def regressions() -> dict:
    import programs  # noqa: PLC0415

    path = programs.cached_capture("views")
    return regression_inputs(path.read_bytes(), "a")  # binding "a" holds 16 float32 values


REGRESSION_NAMES = ["misaligned_int64_vectors", "aligned_int64_vectors", "minimal_valid_bundle", "op_without_table", "op_type_none", "op_type_reserved",
                    "op_type_unknown", "bool_is_2", "shared_table_expansion", "manifest_past_end",
                    "blob_area_wraps", "magic_only", "text_mode_magic", "root_offset_zero"]


@pytest.mark.parametrize("name", REGRESSION_NAMES)
def test_regression_input(fuzzers, regressions, tmp_path, name):
    target, data, expected = regressions[name]
    path = tmp_path / name
    path.write_bytes(data)
    env_extra = {"WRP_FUZZ_VERBOSE": "1"}
    res = subprocess.run([str(fuzzers[target]), str(path)], capture_output=True, text=True, errors="replace",
                         timeout=60, env={"PATH": "/usr/bin:/bin", **env_extra})
    assert res.returncode == 0, res.stderr[-4000:]
    verdicts = [line for line in res.stderr.splitlines() if line.startswith("fuzz: ")]
    assert verdicts, res.stderr[-2000:]
    first = verdicts[0]  # the input as it is, checksums verified
    if expected == "ok":
        assert first.endswith("status=0: ok"), verdicts
    else:
        assert "status=2:" in first and expected in first, verdicts


SIGNATURE_REGRESSIONS = {  # name: (input, the first words of the verdict, or "ok")
    "key_signed_statement": (b"\1" + fuzz_statement(), "ok"),
    "certificate_signed_statement": (b"\2" + fuzz_statement(), "ok"),
    "module_missing_from_statement": (
        b"\1" + fuzz_statement({k: v for k, v in SIGNATURE_FUZZ_FILES.items() if k != "cap_modules/b.o"}),
        "added after signing: cap_modules/b.o"),
    "capture_changed": (b"\2" + fuzz_statement({**SIGNATURE_FUZZ_FILES, "cap.wrp": b"x"}),
                        "changed after signing: cap.wrp"),
    "deep_nesting": (b"\0" + b"[" * 100000, "signature malformed"),
    "deep_nesting_in_payload": (b"\1" + b"[" * 100000 + b"]" * 100000, "signature malformed"),
    "not_json": (b"\0\xff\xfe", "signature malformed"),
}


@pytest.mark.parametrize("name", sorted(SIGNATURE_REGRESSIONS))
def test_signature_regression_input(fuzzers, tmp_path, name):
    data, expected = SIGNATURE_REGRESSIONS[name]
    path = tmp_path / name
    path.write_bytes(data)
    res = subprocess.run([str(fuzzers["signature"]), str(path)], capture_output=True, text=True, errors="replace",
                         timeout=60, env={"PATH": "/usr/bin:/bin", "WRP_FUZZ_VERBOSE": "1"})
    assert res.returncode == 0, res.stderr[-4000:]
    verdicts = [line for line in res.stderr.splitlines() if line.startswith("fuzz: ")]
    assert verdicts, res.stderr[-2000:]
    if expected == "ok":
        assert "status=0: ok" in verdicts[0], verdicts
    else:
        assert "status=8: " + expected in verdicts[0], verdicts


if __name__ == "__main__":  # python tests/reliability/test_fuzz_native.py SEED_DIR
    import tempfile

    sys.path.insert(0, str(ROOT))
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "fuzz-seeds")
    with tempfile.TemporaryDirectory() as work:
        a, b = write_seeds(target, Path(work))
    c = write_signature_seeds(target)
    print(f"{len(list(a.iterdir()))} WRP1 seeds in {a}, {len(list(b.iterdir()))} WRPK seeds in {b}, "
          f"{len(list(c.iterdir()))} signature seeds in {c}")
