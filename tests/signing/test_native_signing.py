"""Signed captures in the C++ replayer: ``wrp-replay --trusted-key`` and ``wrp_verify_signature``.

Everything is made at test time: the capture by ``samples/saxpy.py`` (stock Warp), the keys and
certificates by the ``openssl`` command (EC P-256 and P-384; a CA and a leaf certificate with
keyUsage=digitalSignature), the signatures by model-signing's own CLI (``model_signing sign key``
and ``sign certificate``) over a folder that holds only the capture.  The verdicts and their
words are those of schema/SIGNATURE-RULES.md; tests/signing/test_signing.py compares them with Python's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from native_helpers import CLEAN_ENV, ROOT, WARP_BIN, run

BIN = Path(sys.executable).parent
MODEL_SIGNING = BIN / "model_signing"


def _cmd(*args, cwd=None) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert res.returncode == 0, (args, res.stdout[-2000:], res.stderr[-2000:])
    return res


@pytest.fixture(scope="session")
def keys(tmp_path_factory) -> dict:
    """``{name: Path}``: EC keys ``a`` (P-256) and ``b`` (P-384) (``X.key`` private, ``X.pub`` public),
    a CA ``ca`` with a leaf ``leaf`` (P-256, digitalSignature) and another CA ``ca2``."""
    openssl = shutil.which("openssl")
    if not openssl:
        pytest.skip("the openssl command is not installed")
    if not MODEL_SIGNING.exists():
        pytest.skip(f"model_signing is not installed beside {sys.executable}")
    d = tmp_path_factory.mktemp("signing-keys")
    out = {}
    for name, curve in (("a", "prime256v1"), ("b", "secp384r1")):
        _cmd(openssl, "ecparam", "-name", curve, "-genkey", "-noout", "-out", d / f"{name}.key")
        _cmd(openssl, "ec", "-in", d / f"{name}.key", "-pubout", "-out", d / f"{name}.pub")
        out[f"{name}.key"], out[f"{name}.pub"] = d / f"{name}.key", d / f"{name}.pub"
    for ca in ("ca", "ca2"):
        _cmd(openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", d / f"{ca}.key")
        _cmd(openssl, "req", "-x509", "-new", "-key", d / f"{ca}.key", "-subj", f"/CN=wrpkit test {ca}", "-days", "30",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-out", d / f"{ca}.pem")
        out[ca] = d / f"{ca}.pem"
    _cmd(openssl, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", d / "leaf.key")
    _cmd(openssl, "req", "-new", "-key", d / "leaf.key", "-subj", "/CN=wrpkit test signer", "-out", d / "leaf.csr")
    (d / "leaf.ext").write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n")
    _cmd(openssl, "x509", "-req", "-in", d / "leaf.csr", "-CA", d / "ca.pem", "-CAkey", d / "ca.key",
         "-CAcreateserial", "-days", "10", "-extfile", d / "leaf.ext", "-out", d / "leaf.pem")
    out["leaf.key"], out["leaf"] = d / "leaf.key", d / "leaf.pem"
    return out


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> Path:
    """A folder holding only ``saxpy.wrp`` and ``saxpy_modules/`` (samples/saxpy.py's capture)."""
    d = tmp_path_factory.mktemp("signing-saxpy")
    _cmd(sys.executable, ROOT / "samples" / "saxpy.py", d / "out")
    cap = d / "cap"
    cap.mkdir()
    shutil.copy2(d / "out" / "saxpy.wrp", cap / "saxpy.wrp")
    shutil.copytree(d / "out" / "saxpy_modules", cap / "saxpy_modules")
    assert len(list((cap / "saxpy_modules").iterdir())) >= 1
    return cap


def _sign_key(folder: Path, key: Path, sig: Path) -> None:
    _cmd(MODEL_SIGNING, "sign", "key", folder, "--private_key", key, "--signature", sig)


@pytest.fixture(scope="session")
def signed(tmp_path_factory, pristine, keys) -> dict:
    """``{"a" | "b" | "cert": folder}``: the capture signed by key a, key b, and the leaf certificate."""
    root = tmp_path_factory.mktemp("signing-signed")
    out = {}
    for name in ("a", "b", "cert"):
        folder = root / name
        shutil.copytree(pristine, folder)
        if name == "cert":
            _cmd(MODEL_SIGNING, "sign", "certificate", folder, "--private_key", keys["leaf.key"],
                 "--signing_certificate", keys["leaf"], "--certificate_chain", keys["ca"],
                 "--signature", folder / "saxpy.sig")
        else:
            _sign_key(folder, keys[f"{name}.key"], folder / "saxpy.sig")
        out[name] = folder
    return out


def copy_of(src: Path, dst: Path) -> Path:
    """A private copy of a capture folder; returns its ``saxpy.wrp``."""
    shutil.copytree(src, dst, symlinks=True)
    return dst / "saxpy.wrp"


def replay(replayer, cap, *args, env=None):
    return run(replayer, cap, "--warp-lib-dir", WARP_BIN, *args, env=env)


def refused(res, words: str, code: int = 3) -> str:
    """The one error line of a refusal, asserted to start with ``words``."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    line = res.stderr.splitlines()[0]
    assert line.startswith("wrp-replay: error: " + words), res.stderr
    return line[len("wrp-replay: error: "):]


def module_file(cap: Path) -> Path:
    return sorted((cap.parent / "saxpy_modules").iterdir())[0]


# ---------------------------------------------------------------------------
# Accepted
# ---------------------------------------------------------------------------


def test_a_good_signature_replays(replayer, signed, keys, tmp_path):
    cap = copy_of(signed["a"], tmp_path / "c")
    res = replay(replayer, cap, "--trusted-key", keys["a.pub"])
    assert res.returncode == 0, res.stderr
    res = replay(replayer, cap, "--trusted-key", keys["a.pub"], "--json")
    assert res.returncode == 0, res.stderr
    assert [b["name"] for b in json.loads(res.stdout)["bindings"]] == ["x", "y"]
    # --list verifies too (it opens the file the same way), and a P-384 signature verifies with its key.
    assert replay(replayer, cap, "--trusted-key", keys["a.pub"], "--list").returncode == 0
    cap_b = copy_of(signed["b"], tmp_path / "b")
    assert replay(replayer, cap_b, "--trusted-key", keys["b.pub"]).returncode == 0, "P-384"
    # Any one of several keys will do, in any order.
    assert replay(replayer, cap, "--trusted-key", keys["b.pub"], "--trusted-key", keys["a.pub"]).returncode == 0


def test_trusted_keys_dir_and_signature_path(replayer, signed, keys, tmp_path):
    cap = copy_of(signed["a"], tmp_path / "c")
    both, other = tmp_path / "both", tmp_path / "other"
    both.mkdir()
    other.mkdir()
    shutil.copy(keys["a.pub"], both / "a.pem")
    shutil.copy(keys["b.pub"], both / "b.pem")
    shutil.copy(keys["b.pub"], other / "b.pem")
    (other / "notes.txt").write_text("not a key: only *.pem files are read")
    assert replay(replayer, cap, "--trusted-keys", both).returncode == 0
    msg = refused(replay(replayer, cap, "--trusted-keys", other), "not signed by a trusted key")
    assert msg.endswith("(1 trusted key(s))"), msg
    # --signature: the signature kept elsewhere.
    moved = tmp_path / "elsewhere.sig"
    (cap.parent / "saxpy.sig").rename(moved)
    assert replay(replayer, cap, "--trusted-key", keys["a.pub"], "--signature", moved).returncode == 0
    refused(replay(replayer, cap, "--trusted-key", keys["a.pub"]), "not signed: no signature file")


def test_the_environment_variable_alone_enforces_it(replayer, signed, pristine, keys, tmp_path):
    cap = copy_of(signed["a"], tmp_path / "c")
    assert replay(replayer, cap, env={**CLEAN_ENV, "WRPKIT_TRUSTED_KEYS": str(keys["a.pub"])}).returncode == 0
    both = f":{keys['b.pub']}::{keys['a.pub']}:"  # empty parts are skipped
    assert replay(replayer, cap, env={**CLEAN_ENV, "WRPKIT_TRUSTED_KEYS": both}).returncode == 0
    refused(replay(replayer, cap, env={**CLEAN_ENV, "WRPKIT_TRUSTED_KEYS": str(keys["b.pub"])}),
            "not signed by a trusted key")
    unsigned = copy_of(pristine, tmp_path / "u")
    refused(replay(replayer, unsigned, env={**CLEAN_ENV, "WRPKIT_TRUSTED_KEYS": str(keys["a.pub"])}), "not signed: ")
    # Unset or empty: no requirement.
    assert replay(replayer, unsigned, env={**CLEAN_ENV, "WRPKIT_TRUSTED_KEYS": ""}).returncode == 0
    assert replay(replayer, unsigned).returncode == 0
    # Keys on the command line take the place of the variable.
    env = {**CLEAN_ENV, "WRPKIT_TRUSTED_KEYS": str(keys["b.pub"])}
    assert replay(replayer, cap, "--trusted-key", keys["a.pub"], env=env).returncode == 0


def test_a_signed_wrpk_verifies(replayer, pristine, keys, tmp_path):
    folder = tmp_path / "k"
    folder.mkdir()
    _cmd(BIN / "wrp", "convert", pristine / "saxpy.wrp", folder / "saxpy.wrpk")
    _sign_key(folder, keys["a.key"], folder / "saxpy.sig")
    bundle = folder / "saxpy.wrpk"
    assert replay(replayer, bundle, "--trusted-key", keys["a.pub"]).returncode == 0
    refused(replay(replayer, bundle, "--trusted-key", keys["b.pub"]), "not signed by a trusted key")
    data = bytearray(bundle.read_bytes())
    data[-1] ^= 1
    bundle.write_bytes(bytes(data))
    assert refused(replay(replayer, bundle, "--trusted-key", keys["a.pub"]), "changed after signing") == \
        "changed after signing: saxpy.wrpk"


def test_a_certificate_signature_verifies_with_its_ca(replayer, signed, keys, tmp_path):
    cap = copy_of(signed["cert"], tmp_path / "c")
    assert replay(replayer, cap, "--trusted-key", keys["ca"]).returncode == 0
    msg = refused(replay(replayer, cap, "--trusted-key", keys["ca2"]), "not signed by a trusted key")
    der = subprocess.run(["openssl", "x509", "-in", str(keys["leaf"]), "-outform", "DER"], capture_output=True,
                         check=True).stdout
    assert msg == (f"not signed by a trusted key: {cap.parent / 'saxpy.sig'} was signed by "
                   f"sha256:{hashlib.sha256(der).hexdigest()[:16]} (1 trusted key(s))")
    # A trusted public key is no trust anchor for a certificate chain.
    refused(replay(replayer, cap, "--trusted-key", keys["a.pub"]), "not signed by a trusted key")


# ---------------------------------------------------------------------------
# Refused: the verdicts of schema/SIGNATURE-RULES.md
# ---------------------------------------------------------------------------


def test_unsigned_and_other_key(replayer, signed, pristine, keys, tmp_path):
    unsigned = copy_of(pristine, tmp_path / "u")
    msg = refused(replay(replayer, unsigned, "--trusted-key", keys["a.pub"]), "not signed: ")
    assert msg == f"not signed: no signature file {unsigned.parent / 'saxpy.sig'}"
    cap = copy_of(signed["a"], tmp_path / "c")
    msg = refused(replay(replayer, cap, "--trusted-key", keys["b.pub"]), "not signed by a trusted key")
    hint = hashlib.sha256(keys["a.pub"].read_bytes()).hexdigest()  # model-signing's key hint: SHA-256 of the PEM
    assert msg == (f"not signed by a trusted key: {cap.parent / 'saxpy.sig'} was signed by sha256:{hint[:16]} "
                   "(1 trusted key(s))")


def test_json_failure_output(replayer, signed, keys, tmp_path):
    cap = copy_of(signed["a"], tmp_path / "c")
    res = replay(replayer, cap, "--trusted-key", keys["b.pub"], "--json")
    assert res.returncode == 3
    obj = json.loads(res.stdout)
    assert obj["exit_code"] == 3 and obj["error"].startswith("not signed by a trusted key: ")


def test_one_byte_of_the_wrp_changed(replayer, signed, keys, tmp_path):
    cap = copy_of(signed["a"], tmp_path / "c")
    data = bytearray(cap.read_bytes())
    data[len(data) // 2] ^= 0x40
    cap.write_bytes(bytes(data))
    assert refused(replay(replayer, cap, "--trusted-key", keys["a.pub"]), "changed after signing") == \
        "changed after signing: saxpy.wrp"


@pytest.mark.parametrize("damage", ["changed", "removed", "added", "symlink", "subfolder"])
def test_module_files_after_signing(replayer, signed, keys, tmp_path, damage):
    cap = copy_of(signed["a"], tmp_path / "c")
    mod = module_file(cap)
    name = f"saxpy_modules/{mod.name}"
    if damage == "changed":
        mod.write_bytes(mod.read_bytes() + b"\0")
        expected = f"changed after signing: {name}"
    elif damage == "removed":
        mod.unlink()
        expected = f"removed after signing: {name}"
    elif damage == "added":
        (mod.parent / "zz_extra.o").write_bytes(b"not signed")
        expected = "added after signing: saxpy_modules/zz_extra.o"
    elif damage == "symlink":  # the same bytes through a link: links are never followed
        real = tmp_path / "real.o"
        shutil.copy(mod, real)
        mod.unlink()
        mod.symlink_to(real)
        expected = f"changed after signing: {name} (not a regular file)"
    else:  # a subfolder is no module file (Warp never reads one): still accepted
        (mod.parent / "sub").mkdir()
        (mod.parent / "sub" / "x.o").write_bytes(b"x")
        expected = None
    res = replay(replayer, cap, "--trusted-key", keys["a.pub"])
    if expected is None:
        assert res.returncode == 0, res.stderr
    else:
        assert refused(res, expected.split(":")[0]) == expected


def test_modules_dir_option_is_the_signed_folder(replayer, signed, keys, tmp_path):
    cap = copy_of(signed["a"], tmp_path / "c")
    moved = tmp_path / "mods"
    (cap.parent / "saxpy_modules").rename(moved)
    assert replay(replayer, cap, "--trusted-key", keys["a.pub"], "--modules-dir", moved).returncode == 0
    (moved / "new.o").write_bytes(b"x")
    assert refused(replay(replayer, cap, "--trusted-key", keys["a.pub"], "--modules-dir", moved),
                   "added after signing") == "added after signing: saxpy_modules/new.o"


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty", "folder"])
def test_malformed_signatures(replayer, signed, keys, tmp_path, how):
    cap = copy_of(signed["a"], tmp_path / "c")
    sig = cap.parent / "saxpy.sig"
    if how == "truncated":
        sig.write_bytes(sig.read_bytes()[: len(sig.read_bytes()) // 2])
    elif how == "garbage":
        sig.write_bytes(os.urandom(300))
    elif how == "empty":
        sig.write_bytes(b"")
    else:
        sig.unlink()
        sig.mkdir()
    msg = refused(replay(replayer, cap, "--trusted-key", keys["a.pub"]), "signature malformed")
    assert msg.startswith(f"signature malformed: {sig}: "), msg


def test_the_verdict_comes_before_anything_is_loaded(replayer, pristine, keys, tmp_path):
    """An unsigned capture whose modules folder is missing, with no Warp to load: still "not signed"."""
    cap = copy_of(pristine, tmp_path / "u")
    shutil.rmtree(cap.parent / "saxpy_modules")
    for extra in ([], ["--list"]):
        res = run(replayer, cap, "--trusted-key", keys["a.pub"], "--warp-lib-dir", tmp_path / "no-warp-here", *extra)
        assert refused(res, "not signed: ") == f"not signed: no signature file {cap.parent / 'saxpy.sig'}"
    # A capture that is no capture at all: the signature is checked before a byte of it is decoded.
    junk = tmp_path / "junk" / "saxpy.wrp"
    junk.parent.mkdir()
    junk.write_bytes(b"this is not a capture")
    refused(run(replayer, junk, "--trusted-key", keys["a.pub"]), "not signed: ")


def test_usage_errors(replayer, signed, keys, tmp_path):
    cap = copy_of(signed["a"], tmp_path / "c")
    res = replay(replayer, cap, "--trusted-key", tmp_path / "missing.pem")
    assert res.returncode == 2 and "trusted key not found" in res.stderr, res.stderr
    res = replay(replayer, cap, "--trusted-key", keys["a.key"])  # a private key is refused, not used
    assert res.returncode == 2 and "private key" in res.stderr, res.stderr
    (tmp_path / "text.pem").write_text("no PEM here\n")
    res = replay(replayer, cap, "--trusted-key", tmp_path / "text.pem")
    assert res.returncode == 2 and "holds no PEM public key or certificate" in res.stderr, res.stderr
    res = replay(replayer, cap, "--signature", cap.parent / "saxpy.sig")
    assert res.returncode == 2 and "--signature needs" in res.stderr, res.stderr
    res = replay(replayer, cap, "--trusted-key", keys["b.pub"], "--json")
    assert res.returncode == 3
    res = replay(replayer, cap, "--trusted-key", tmp_path / "missing.pem", "--json")
    assert res.returncode == 2 and json.loads(res.stdout)["exit_code"] == 2
    res = replay(replayer, cap, env={**CLEAN_ENV, "WRPKIT_TRUSTED_KEYS": str(tmp_path / "missing.pem")})
    assert res.returncode == 2 and "WRPKIT_TRUSTED_KEYS: trusted key not found" in res.stderr, res.stderr


def test_help_names_the_options(replayer):
    text = run(replayer, "--help", check_rc=0).stdout
    for opt in ("--trusted-key PEM", "--trusted-keys DIR", "--signature PATH", "WRPKIT_TRUSTED_KEYS"):
        assert opt in text, opt
    assert not [ln for ln in text.splitlines() if len(ln) > 80]


# ---------------------------------------------------------------------------
# The C API: wrp_verify_signature (through wrpkit.run.replay.native_api)
# ---------------------------------------------------------------------------


def test_wrp_verify_signature(signed, pristine, keys, tmp_path, monkeypatch):
    from wrpkit.run.replay import native_api  # noqa: PLC0415

    try:
        native_api.library()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"libwrp_replay is not installed: {e}")
    monkeypatch.delenv("WRPKIT_TRUSTED_KEYS", raising=False)
    cap = copy_of(signed["a"], tmp_path / "c")
    assert native_api.verify_signature(cap, [keys["a.pub"]]) == (0, "")
    rc, msg = native_api.verify_signature(cap, [keys["b.pub"]])
    assert rc == 8 and msg.startswith("not signed by a trusted key: "), msg
    assert native_api.verify_signature(cap, []) == (1, "no trusted keys given")
    monkeypatch.setenv("WRPKIT_TRUSTED_KEYS", str(keys["a.pub"]))
    assert native_api.verify_signature(cap, []) == (0, "")
    monkeypatch.delenv("WRPKIT_TRUSTED_KEYS")
    moved = tmp_path / "mods"
    (cap.parent / "saxpy_modules").rename(moved)
    rc, msg = native_api.verify_signature(cap, [keys["a.pub"]])
    assert rc == 8 and msg.startswith("removed after signing: saxpy_modules/"), msg
    assert native_api.verify_signature(cap, [keys["a.pub"]], modules_dir=moved) == (0, "")
    sig = tmp_path / "s.sig"
    (cap.parent / "saxpy.sig").rename(sig)
    assert native_api.verify_signature(cap, [keys["a.pub"]], signature_path=sig, modules_dir=moved) == (0, "")
    rc, msg = native_api.verify_signature(copy_of(pristine, tmp_path / "u"), [keys["a.pub"]])
    assert rc == 8 and msg.startswith("not signed: no signature file "), msg


def test_open_memory_ignores_trust(pristine, keys, monkeypatch):
    """wrp_program_open_memory's caller verified its bytes: no trust field nor the environment applies."""
    import ctypes  # noqa: PLC0415

    from wrpkit.run.replay import native_api  # noqa: PLC0415

    try:
        lib = native_api.library()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"libwrp_replay is not installed: {e}")
    lib.wrp_program_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(native_api._Options),
                                     ctypes.POINTER(ctypes.c_void_p)]
    monkeypatch.setenv("WRPKIT_TRUSTED_KEYS", str(keys["a.pub"]))
    opts = native_api._Options()
    lib.wrp_options_init(ctypes.byref(opts))
    opts.validate_only = 1
    opts.modules_optional = 1
    data = (pristine / "saxpy.wrp").read_bytes()
    files = sorted((pristine / "saxpy_modules").iterdir())
    blobs = [f.read_bytes() for f in files]
    mods = (native_api._Module * len(files))(*[native_api._Module(f.name.encode(), ctypes.cast(ctypes.c_char_p(b),
                                                                                               ctypes.c_void_p),
                                                                  len(b)) for f, b in zip(files, blobs)])
    handle = ctypes.c_void_p()
    rc = lib.wrp_program_open_memory(data, len(data), mods, len(files), ctypes.byref(opts), ctypes.byref(handle))
    assert rc == 0, lib.wrp_last_error()
    lib.wrp_program_destroy(handle)
    # The same file opened by path: the environment requires a signature it does not have.
    rc = lib.wrp_program_open(os.fsencode(pristine / "saxpy.wrp"), ctypes.byref(opts), ctypes.byref(handle))
    assert rc == 8 and lib.wrp_last_error().startswith(b"not signed: no signature file "), lib.wrp_last_error()
    # A trust field that makes no sense is an argument error where it is used, and ignored in memory.
    opts.num_trusted_keys = 2  # with trusted_keys NULL
    rc = lib.wrp_program_open_memory(data, len(data), mods, len(files), ctypes.byref(opts), ctypes.byref(handle))
    assert rc == 0, lib.wrp_last_error()
    lib.wrp_program_destroy(handle)
    rc = lib.wrp_program_open(os.fsencode(pristine / "saxpy.wrp"), ctypes.byref(opts), ctypes.byref(handle))
    assert rc == 1 and b"trusted_keys is NULL" in lib.wrp_last_error()
