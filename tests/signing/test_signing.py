"""Signed captures (schema/SIGNATURE-RULES.md): wrp sign, --trusted-key everywhere, model-signing interop.

Every capture is made at test time by stock Warp (the ``captures`` fixture), every key by the
``openssl`` command, and signatures by ``wrp sign`` or by the model-signing package's own CLI.
Each refusal is checked in the Python routes (``wrp validate``, ``wrp replay``, ``wrpkit.load``)
and, where wrp-replay is installed, in C++ with the same exit code and the same first words
(``test_python_and_cpp_agree``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import proc_helpers

BIN = Path(sys.executable).parent
WRP = str(BIN / "wrp")
MODEL_SIGNING = str(BIN / "model_signing")


def run(*args, env=None, timeout=300):
    full = dict(os.environ)
    full.pop("WRPKIT_TRUSTED_KEYS", None)
    full.update(env or {})
    return proc_helpers.run(*args, env=full, timeout=timeout)


def wrp(*args, env=None):
    return run(WRP, *args, env=env)


def openssl(*args):
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def ec_key(folder: Path, name: str, curve: str = "prime256v1") -> tuple:
    priv, pub = folder / f"{name}.key.pem", folder / f"{name}.pub.pem"
    openssl("ecparam", "-name", curve, "-genkey", "-noout", "-out", priv)
    openssl("ec", "-in", priv, "-pubout", "-out", pub)
    return priv, pub


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    k = {"a": ec_key(d, "a"), "b": ec_key(d, "b"), "p384": ec_key(d, "p384", "secp384r1")}
    # A CA, and a leaf it signed that may sign code; a second CA that signed nothing here.
    for ca in ("ca", "ca2"):
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", d / f"{ca}.key.pem")
        openssl("req", "-new", "-x509", "-key", d / f"{ca}.key.pem", "-out", d / f"{ca}.pem", "-days", "30",
                "-subj", f"/CN=wrpkit test {ca}", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign")
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", d / "leaf.key.pem")
    openssl("req", "-new", "-key", d / "leaf.key.pem", "-out", d / "leaf.csr", "-subj", "/CN=wrpkit test signer")
    (d / "leaf.ext").write_text("keyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n")
    openssl("x509", "-req", "-in", d / "leaf.csr", "-CA", d / "ca.pem", "-CAkey", d / "ca.key.pem",
            "-CAcreateserial", "-out", d / "leaf.pem", "-days", "30", "-extfile", d / "leaf.ext")
    k["dir"] = d
    return k


def capture_copy(captures, folder: Path, name: str = "views") -> Path:
    """A private copy of a real capture and its modules folder, in a folder of its own."""
    src = Path(captures[name])
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / src.name
    shutil.copyfile(src, dst)
    shutil.copytree(src.with_name(src.stem + "_modules"), folder / (src.stem + "_modules"))
    return dst


def modules_of(capture: Path) -> Path:
    return capture.with_name(capture.stem + "_modules")


@pytest.fixture(scope="module")
def signed_once(captures, keys, tmp_path_factory):
    """A capture signed by ``wrp sign`` with key a, once for the module (a start of `wrp sign` costs ~1 s)."""
    cap = capture_copy(captures, tmp_path_factory.mktemp("signed") / "cap")
    res = wrp("sign", cap, "--key", keys["a"][0], "--json")
    assert res.returncode == 0, res.stderr
    return cap


@pytest.fixture
def signed(signed_once, tmp_path):
    """A private copy of :func:`signed_once`'s folder (capture, modules, signature): tests damage it."""
    shutil.copytree(signed_once.parent, tmp_path / "cap")
    return tmp_path / "cap" / signed_once.name


def verdict(res) -> str:
    """The first words of a refusal (before the first ':'), from stderr's error line or --json."""
    for line in res.stderr.splitlines():
        if line.startswith("error: "):
            return line[len("error: "):].split(":")[0]
    return ""


# ---------------------------------------------------------------------------
# Signing, and the capture that verifies
# ---------------------------------------------------------------------------


def test_sign_then_every_route_accepts_it(signed, keys):
    info = json.loads(wrp("inspect", signed, "--json").stdout)
    fp = "sha256:" + hashlib.sha256(keys["a"][1].read_bytes()).hexdigest()
    assert info["signed"] == {"path": str(signed.with_suffix(".sig")), "kind": "key", "key": fp}
    for args in (["validate"], ["check"], ["replay", "--engine", "python"]):
        res = wrp(*args, signed, "--trusted-key", keys["a"][1])
        assert res.returncode == 0, (args, res.stdout, res.stderr)
    import wrpkit  # noqa: PLC0415

    prog = wrpkit.load(signed, trusted_keys=[keys["a"][1]])
    assert prog.run()  # it replays


def test_signature_names_the_capture_and_every_module_file(signed):
    bundle = json.loads(signed.with_suffix(".sig").read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    names = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    mods = modules_of(signed)
    expected = {signed.name: hashlib.sha256(signed.read_bytes()).hexdigest()}
    expected.update({f"{mods.name}/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest() for p in mods.iterdir()})
    assert names == expected


def test_model_signing_verifies_what_wrp_sign_wrote(signed, keys):
    res = run(MODEL_SIGNING, "verify", "key", signed.parent, "--signature", signed.with_suffix(".sig"),
              "--public_key", keys["a"][1])
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_folder_signed_by_model_signing_is_accepted(captures, keys, tmp_path):
    cap = capture_copy(captures, tmp_path / "cap")
    res = run(MODEL_SIGNING, "sign", "key", cap.parent, "--private_key", keys["b"][0],
              "--signature", cap.with_suffix(".sig"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert wrp("validate", cap, "--trusted-key", keys["b"][1]).returncode == 0
    res = wrp("replay", cap, "--trusted-key", keys["b"][1])
    assert res.returncode == 0, res.stderr
    assert wrp("validate", cap, "--trusted-key", keys["a"][1]).returncode == 3


@pytest.mark.slow  # 3 s: makes P-384 keys and signs
def test_p384_keys_and_a_bundle(captures, keys, tmp_path):
    cap = capture_copy(captures, tmp_path / "cap")
    bundle = tmp_path / "cap" / "views.wrpk"
    assert wrp("convert", cap, bundle).returncode == 0
    shutil.rmtree(modules_of(cap))
    cap.unlink()
    assert wrp("sign", bundle, "--key", keys["p384"][0]).returncode == 0
    assert wrp("validate", bundle, "--trusted-key", keys["p384"][1]).returncode == 0
    res = run(MODEL_SIGNING, "verify", "key", bundle.parent, "--signature", bundle.with_suffix(".sig"),
              "--public_key", keys["p384"][1])
    assert res.returncode == 0, res.stdout + res.stderr
    data = bytearray(bundle.read_bytes())
    data[-1] ^= 1
    bundle.write_bytes(bytes(data))
    res = wrp("validate", bundle, "--trusted-key", keys["p384"][1])
    assert res.returncode == 3 and "changed after signing: views.wrpk" in res.stderr


def test_certificate_signing(captures, keys, tmp_path):
    d = keys["dir"]
    cap = capture_copy(captures, tmp_path / "cap")
    res = wrp("sign", cap, "--key", d / "leaf.key.pem", "--certificate", d / "leaf.pem", "--chain", d / "ca.pem")
    assert res.returncode == 0, res.stderr
    assert wrp("validate", cap, "--trusted-key", d / "ca.pem").returncode == 0
    res = wrp("validate", cap, "--trusted-key", d / "ca2.pem")
    assert res.returncode == 3 and verdict(res) == "not signed by a trusted key", res.stderr
    res = run(MODEL_SIGNING, "verify", "certificate", cap.parent, "--signature", cap.with_suffix(".sig"),
              "--certificate_chain", d / "ca.pem")
    assert res.returncode == 0, res.stdout + res.stderr


# ---------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------


def _unsigned(cap, keys):
    cap.with_suffix(".sig").unlink()


def _other_key(cap, keys):
    assert wrp("sign", cap, "--key", keys["b"][0]).returncode == 0


def _wrp_byte(cap, keys):
    data = bytearray(cap.read_bytes())
    data[len(data) // 2] ^= 0x40
    cap.write_bytes(bytes(data))


def _module_changed(cap, keys):
    f = sorted(modules_of(cap).iterdir())[0]
    f.write_bytes(f.read_bytes() + b"\0")


def _module_removed(cap, keys):
    sorted(modules_of(cap).iterdir())[0].unlink()


def _module_added(cap, keys):
    (modules_of(cap) / "zz_extra.o").write_bytes(b"\x7fELF not loaded")


def _truncated(cap, keys):
    sig = cap.with_suffix(".sig")
    sig.write_bytes(sig.read_bytes()[:100])


def _garbage(cap, keys):
    cap.with_suffix(".sig").write_bytes(os.urandom(300))


def _deep(cap, keys):
    cap.with_suffix(".sig").write_text("[" * 100000 + "]" * 100000)


def _huge(cap, keys):
    # Over the 64 MiB a signature may hold: refused before it is read (a sparse file, no disk used).
    with open(cap.with_suffix(".sig"), "r+b") as f:
        f.truncate(65 << 20)


def _huge_field(cap, keys):
    # A hint of 8 MiB inside a bundle under the cap: a field of the wrong size, refused as such.
    sig = cap.with_suffix(".sig")
    bundle = json.loads(sig.read_text())
    bundle["verificationMaterial"]["publicKey"]["hint"] = "a" * (8 << 20)
    sig.write_text(json.dumps(bundle))


def _payload_swapped(cap, keys):
    # The envelope's payload replaced by another statement: the signature no longer covers it.
    sig = cap.with_suffix(".sig")
    bundle = json.loads(sig.read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    statement["predicate"]["resources"] = statement["predicate"]["resources"][:1]
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    sig.write_text(json.dumps(bundle))


REFUSALS = {
    "unsigned": (_unsigned, "not signed"),
    "other key": (_other_key, "not signed by a trusted key"),
    "capture byte changed": (_wrp_byte, "changed after signing"),
    "module changed": (_module_changed, "changed after signing"),
    "module removed": (_module_removed, "removed after signing"),
    "module added": (_module_added, "added after signing"),
    "truncated signature": (_truncated, "signature malformed"),
    "garbage signature": (_garbage, "signature malformed"),
    "deeply nested signature": (_deep, "signature malformed"),
    "huge signature": (_huge, "signature malformed"),
    "huge field": (_huge_field, "signature malformed"),
    "payload swapped": (_payload_swapped, "not signed by a trusted key"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_refusal_is_exit_3_with_its_reason(signed, keys, case):
    damage, words = REFUSALS[case]
    damage(signed, keys)
    for args in (["validate"], ["replay"], ["check"]):
        res = wrp(*args, signed, "--trusted-key", keys["a"][1])
        assert res.returncode == 3, (args, res.stdout, res.stderr)
        assert verdict(res) == words, (args, res.stderr)
        assert "Traceback" not in res.stderr
    import wrpkit  # noqa: PLC0415

    with pytest.raises(wrpkit.WrpError) as e:
        wrpkit.load(signed, trusted_keys=[keys["a"][1]])
    assert e.value.exit_code == 3 and e.value.message.split(":")[0] == words


def test_json_error_says_which(signed, keys):
    _module_added(signed, keys)
    res = wrp("replay", signed, "--trusted-key", keys["a"][1], "--json")
    doc = json.loads(res.stdout)
    assert res.returncode == 3 and doc["exit_code"] == 3
    assert doc["error"] == f"added after signing: {signed.stem}_modules/zz_extra.o"


def test_nothing_is_read_before_the_verdict(captures, keys, tmp_path):
    # No modules folder and no signature: the answer is the signature's, not the missing modules'.
    cap = capture_copy(captures, tmp_path / "cap")
    shutil.rmtree(modules_of(cap))
    res = wrp("replay", cap, "--trusted-key", keys["a"][1])
    assert res.returncode == 3 and verdict(res) == "not signed", res.stderr


def test_environment_requires_signatures(signed, keys, tmp_path):
    env = {"WRPKIT_TRUSTED_KEYS": str(keys["b"][1])}
    res = wrp("replay", signed, env=env)
    assert res.returncode == 3 and verdict(res) == "not signed by a trusted key"
    keydir = tmp_path / "trusted"
    keydir.mkdir()
    shutil.copy(keys["a"][1], keydir / "a.pem")
    assert wrp("validate", signed, env={"WRPKIT_TRUSTED_KEYS": f"{keys['b'][1]}:{keydir}"}).returncode == 0
    assert wrp("validate", signed, "--trusted-keys", keydir).returncode == 0
    assert wrp("inspect", signed, env=env).returncode == 0  # inspect loads nothing: no signature needed


def test_signature_elsewhere(signed, keys, tmp_path):
    moved = tmp_path / "elsewhere.sig"
    signed.with_suffix(".sig").rename(moved)
    assert wrp("validate", signed, "--trusted-key", keys["a"][1]).returncode == 3
    assert wrp("validate", signed, "--trusted-key", keys["a"][1], "--signature", moved).returncode == 0


@pytest.mark.parametrize("bad", ["private", "missing", "empty", "not ec"])
def test_bad_trusted_key_is_a_usage_error(signed, keys, tmp_path, bad):
    path = {"private": keys["a"][0], "missing": tmp_path / "nope.pem", "empty": tmp_path / "empty.pem",
            "not ec": tmp_path / "rsa.pub.pem"}[bad]
    if bad == "empty":
        path.write_text("")
    if bad == "not ec":
        openssl("genrsa", "-out", tmp_path / "rsa.pem", "2048")
        openssl("rsa", "-in", tmp_path / "rsa.pem", "-pubout", "-out", path)
    res = wrp("validate", signed, "--trusted-key", path)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr


def _sign_statement(cap: Path, priv: Path, resources: list) -> None:
    """A signature by a trusted key over a hand-made statement (hostile contents, valid signature)."""
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    root = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources)).hexdigest()
    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "x", "digest": {"sha256": root}}],
                 "predicateType": "https://model_signing/signature/v1.0",
                 "predicate": {"serialization": {"method": "files", "hash_type": "sha256"}, "resources": resources}}
    payload = json.dumps(statement).encode()
    key = serialization.load_pem_private_key(priv.read_bytes(), None)
    pae = b"DSSEv1 %d %s %d %s" % (28, b"application/vnd.in-toto+json", len(payload), payload)
    sig = key.sign(pae, ec.ECDSA(hashes.SHA256()))
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    bundle = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
              "verificationMaterial": {"publicKey": {"hint": hashlib.sha256(pem).hexdigest()}},
              "dsseEnvelope": {"payload": base64.b64encode(payload).decode(),
                               "payloadType": "application/vnd.in-toto+json",
                               "signatures": [{"sig": base64.b64encode(sig).decode()}]}}
    cap.with_suffix(".sig").write_text(json.dumps(bundle))


def _resource(name: str, data: bytes) -> dict:
    return {"name": name, "algorithm": "sha256", "digest": hashlib.sha256(data).hexdigest()}


@pytest.mark.parametrize("hostile", ["dotdot", "absolute", "duplicate", "backslash", "empty part", "blake2"])
def test_hostile_statements_signed_by_a_trusted_key(signed, keys, hostile):
    good = [_resource(signed.name, signed.read_bytes())] + [
        _resource(f"{signed.stem}_modules/{p.name}", p.read_bytes()) for p in sorted(modules_of(signed).iterdir())]
    extra = {"dotdot": [_resource("../outside.o", b"x")], "absolute": [_resource("/etc/passwd", b"x")],
             "duplicate": [good[0]], "backslash": [_resource("a\\b", b"x")],
             "empty part": [_resource("a//b", b"x")],
             "blake2": [dict(_resource("b.o", b"x"), algorithm="blake2")]}[hostile]
    _sign_statement(signed, keys["a"][0], good + extra)
    res = wrp("validate", signed, "--trusted-key", keys["a"][1])
    assert res.returncode == 3 and verdict(res) == "signature malformed", res.stderr
    # The same statement without the hostile entry is accepted: the refusal is the entry's.
    _sign_statement(signed, keys["a"][0], good)
    assert wrp("validate", signed, "--trusted-key", keys["a"][1]).returncode == 0


# ---------------------------------------------------------------------------
# Commands that write a new capture, and a regress suite
# ---------------------------------------------------------------------------


def test_convert_says_the_output_is_unsigned_and_signs_it_with_key(signed, keys, tmp_path):
    out = tmp_path / "out" / "views.wrpk"
    res = wrp("convert", signed, out, "--trusted-key", keys["a"][1])
    assert res.returncode == 0 and "is not" in res.stderr and "wrp sign" in res.stderr
    assert wrp("validate", out, "--trusted-key", keys["a"][1]).returncode == 3
    res = wrp("convert", signed, out, "--trusted-key", keys["a"][1], "--key", keys["b"][0], "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["signature"] == str(out.with_suffix(".sig"))
    assert wrp("validate", out, "--trusted-key", keys["b"][1]).returncode == 0
    _wrp_byte(signed, keys)
    assert wrp("convert", signed, tmp_path / "x.wrpk", "--trusted-key", keys["a"][1]).returncode == 3
    assert not (tmp_path / "x.wrpk").exists()


@pytest.mark.slow  # more than 3 s on two cores: the full suite runs it
def test_regress_counts_an_untrusted_case_as_an_error(captures, keys, tmp_path):
    suite = tmp_path / "suite"
    good = capture_copy(captures, suite / "good")
    bad = capture_copy(captures, suite / "bad")
    for cap in (good, bad):
        assert wrp("regress", suite, "--update").returncode == 0
        assert wrp("sign", cap, "--key", keys["a"][0]).returncode == 0
    _module_changed(bad, keys)
    res = wrp("regress", suite, "--trusted-key", keys["a"][1], "--json")
    cases = {c["name"]: c for c in json.loads(res.stdout)["cases"]}
    assert res.returncode == 1
    assert cases["good/views"]["verdict"] == "pass"
    assert cases["bad/views"]["verdict"] == "error"
    assert cases["bad/views"]["message"].startswith("changed after signing: views_modules/")


# ---------------------------------------------------------------------------
# Python and C++ give the same verdict
# ---------------------------------------------------------------------------


def _same_words(py: str, cpp: str) -> bool:
    """The same message, except that a malformed signature's detail may be worded by each parser."""
    if py.startswith("signature malformed: "):
        return cpp.startswith(py[: py.index(": ", len("signature malformed: ")) + 2])
    return py == cpp


def _cpp_error(res) -> str:
    try:
        return json.loads(res.stdout)["error"]
    except (ValueError, KeyError):
        return res.stdout + res.stderr


PARITY = dict(REFUSALS, **{"good": (lambda cap, keys: None, None)})


@pytest.mark.parametrize("case", sorted(PARITY))
def test_python_and_cpp_agree(signed, keys, replayer, case):
    damage, words = PARITY[case]
    damage(signed, keys)
    py = wrp("validate", signed, "--trusted-key", keys["a"][1], "--json")
    cpp = run(replayer, signed, "--trusted-key", keys["a"][1], "--json")
    assert py.returncode == cpp.returncode == (0 if words is None else 3), (py.stdout, cpp.stdout, cpp.stderr)
    if words is not None:
        py_error, cpp_error = json.loads(py.stdout)["error"], _cpp_error(cpp)
        assert py_error.split(":")[0] == words
        assert _same_words(py_error, cpp_error), (py_error, cpp_error)


@pytest.mark.parametrize("hostile", ["dotdot", "duplicate", "blake2"])
def test_python_and_cpp_agree_on_hostile_statements(signed, keys, replayer, hostile):
    good = [_resource(signed.name, signed.read_bytes())]
    extra = {"dotdot": [_resource("../outside.o", b"x")], "duplicate": [good[0]],
             "blake2": [dict(_resource("b.o", b"x"), algorithm="blake2")]}[hostile]
    _sign_statement(signed, keys["a"][0], good + extra)
    py = wrp("validate", signed, "--trusted-key", keys["a"][1], "--json")
    cpp = run(replayer, signed, "--trusted-key", keys["a"][1], "--json")
    assert py.returncode == cpp.returncode == 3
    assert _same_words(json.loads(py.stdout)["error"], _cpp_error(cpp))


def test_cpp_environment_and_certificates(captures, keys, replayer, tmp_path):
    d = keys["dir"]
    cap = capture_copy(captures, tmp_path / "cap")
    res = wrp("sign", cap, "--key", d / "leaf.key.pem", "--certificate", d / "leaf.pem")
    assert res.returncode == 2 and "--chain" in res.stderr  # model-signing needs the chain up to the root
    res = wrp("sign", cap, "--key", d / "leaf.key.pem", "--certificate", d / "leaf.pem", "--chain", d / "ca.pem")
    assert res.returncode == 0, res.stderr
    assert run(replayer, cap, "--trusted-key", d / "ca.pem").returncode == 0
    res = run(replayer, cap, env={"WRPKIT_TRUSTED_KEYS": str(d / "ca2.pem")})
    assert res.returncode == 3 and "not signed by a trusted key" in res.stderr + res.stdout
    res = run(replayer, cap, "--json", env={"WRPKIT_TRUSTED_KEYS": str(keys["a"][1])})
    assert res.returncode == 3
    # Through the python CLI's native engine: the parent checks, and wrp-replay checks again itself.
    assert wrp("replay", cap, "--engine", "native", "--trusted-key", d / "ca.pem").returncode == 0


@pytest.mark.slow  # exports a runtime folder (Warp's libraries)
def test_signed_in_one_folder_verified_in_another_with_no_python(captures, keys, tmp_path, replayer):
    """A user's path: sign, copy the capture elsewhere, verify with export-runtime's wrp-replay under env -i."""
    cap = capture_copy(captures, tmp_path / "made")
    assert wrp("sign", cap, "--key", keys["a"][0]).returncode == 0
    shipped = tmp_path / "device" / "captures"
    shipped.mkdir(parents=True)
    for p in (cap, cap.with_suffix(".sig")):
        shutil.copy(p, shipped)
    shutil.copytree(modules_of(cap), shipped / modules_of(cap).name)
    rt = tmp_path / "device" / "rt"
    assert wrp("export-runtime", rt).returncode == 0
    plain = {"PATH": "/usr/bin:/bin"}
    res = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in plain.items()), str(rt / "wrp-replay"),
                          str(shipped / cap.name), "--trusted-key", str(keys["a"][1])], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    res = subprocess.run(["env", "-i", f"WRPKIT_TRUSTED_KEYS={keys['b'][1]}", str(rt / "wrp-replay"),
                          str(shipped / cap.name)], capture_output=True, text=True)
    assert res.returncode == 3 and "not signed by a trusted key" in res.stderr
