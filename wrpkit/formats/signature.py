"""Signed captures: the model-signing (OMS) bundle, a capture's signed set, and the verdict.

``schema/SIGNATURE-RULES.md`` is the spec, step by step; ``native/src/signature.cpp`` implements
the same steps in C++ and ``tests/signing/test_signing.py`` holds the two to the same verdicts.  The
verdict comes from the bytes alone, before a capture is decoded, so it sits with the codecs:
like a ``.wrpk``'s blob checksums, it decides whether the bytes may be read as a capture at all.

A :class:`Trust` holds the PEM text of the trusted keys and certificates (so it pickles to a
worker as it is); :meth:`Trust.verify` gives the verdict on one capture and returns the module
bytes it hashed, which are then the bytes loaded.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from ..records import field, record
from ..errors import WrpIOError, WrpSignatureError, WrpUsageError

#: The environment variable that requires signatures for every load: key files or folders, ``:``-separated.
TRUST_ENV = "WRPKIT_TRUSTED_KEYS"
SIGNATURE_SUFFIX = ".sig"
#: ``trust=ENVIRONMENT``: the trust :data:`TRUST_ENV` requires (a default of the loaders).
ENVIRONMENT = type("EnvironmentTrust", (), {"__repr__": lambda self: "ENVIRONMENT"})()
MAX_SIGNATURE_BYTES = 64 << 20
MAX_RESOURCES = 1_000_000
MAX_NAME_BYTES = 4096
MAX_SIG_BYTES = 512
#: JSON nesting deeper than this is refused before it is parsed (a deep document is no bundle, and
#: parsers recurse).
MAX_JSON_DEPTH = 64

BUNDLE_MEDIA_PREFIX = "application/vnd.dev.sigstore.bundle"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"

_B64 = re.compile(rb"[A-Za-z0-9+/]*={0,2}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PEM = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)

SIGN_HINT = "Sign it with `wrp sign CAPTURE --key KEY.pem`, or point --signature at its signature."
TAMPER_HINT = ("The capture is not the one that was signed: get it again from its source (and sign it anew "
               "if you changed it on purpose).")


def default_signature_path(capture: os.PathLike) -> Path:
    """``DIR/STEM.sig`` beside a capture ``DIR/STEM.EXT``."""
    p = Path(capture)
    return p.with_name(p.stem + SIGNATURE_SUFFIX)


def modules_prefix(capture: os.PathLike) -> str:
    """The resource-name prefix of a ``.wrp``'s module files: ``STEM_modules/``."""
    return Path(capture).stem + "_modules/"


# ---------------------------------------------------------------------------
# Trusted keys
# ---------------------------------------------------------------------------


def _sha256(data: bytes = b""):
    """``hashlib.sha256(data)``, with hashlib (OpenSSL's library, ~4 ms to load) imported when first
    used: every command that takes --trusted-key imports this module, and most check no signature."""
    import hashlib  # noqa: PLC0415

    return hashlib.sha256(data)


@record(frozen=True)
class TrustedPem:
    """One trusted PEM object: ``kind`` is ``"key"`` or ``"cert"``; ``source`` the file it came from."""

    kind: str
    pem: bytes
    source: str


@record
class Trust:
    """The keys and certificates a capture must be signed by, and where its signature is.

    Attributes:
        pems: Every trusted public key and certificate, in the order given.
        signature: The signature file, or None for ``STEM.sig`` beside each capture.
    """

    pems: list
    signature: Optional[Path] = None
    _loaded: Optional[tuple] = field(default=None, repr=False, compare=False)

    @classmethod
    def from_paths(cls, keys: Iterable = (), dirs: Iterable = (), signature=None) -> "Trust":
        """Read trusted keys from PEM files and from every ``*.pem`` of folders.

        Raises:
            WrpUsageError: A path is missing or unreadable, or holds no public key or
                certificate (a private key is named as such).
        """
        pems = []
        for k in keys:
            pems += _read_pems(Path(k))
        for d in dirs:
            pems += _read_pem_dir(Path(d))
        if not pems:
            raise WrpUsageError("no trusted keys given", hint="Pass --trusted-key PUB.pem or --trusted-keys DIR.")
        return cls(pems, Path(signature) if signature is not None else None)

    @classmethod
    def from_environment(cls, signature=None) -> Optional["Trust"]:
        """The trust :data:`TRUST_ENV` requires, or None when it is unset or empty."""
        value = os.environ.get(TRUST_ENV, "")
        paths = [p for p in value.split(":") if p]
        if not paths:
            return None
        keys = [p for p in paths if not Path(p).is_dir()]
        dirs = [p for p in paths if Path(p).is_dir()]
        try:
            return cls.from_paths(keys, dirs, signature)
        except WrpUsageError as e:
            raise WrpUsageError(f"{TRUST_ENV}: {e.message}", hint=e.hint) from None

    @classmethod
    def resolve(cls, keys: Sequence = (), dirs: Sequence = (), signature=None) -> Optional["Trust"]:
        """The trust a command asks for: its options, else the environment, else None.

        Raises:
            WrpUsageError: ``signature`` without any trusted key, or a bad key file.
        """
        if keys or dirs:
            return cls.from_paths(keys, dirs, signature)
        trust = cls.from_environment(signature)
        if trust is None and signature is not None:
            raise WrpUsageError("--signature needs trusted keys to check it against",
                                hint=f"Add --trusted-key PUB.pem (or set {TRUST_ENV}).")
        return trust

    @property
    def sources(self) -> list:
        """The files the trusted PEMs were read from, each once, in order."""
        return list(dict.fromkeys(t.source for t in self.pems))

    def __getstate__(self):
        return {"pems": self.pems, "signature": self.signature}

    def __setstate__(self, state):
        self.pems, self.signature, self._loaded = state["pems"], state["signature"], None

    def _objects(self):
        """``(keys, certs)``: cryptography objects of the trusted PEMs, made once."""
        if self._loaded is None:
            from cryptography import x509  # noqa: PLC0415
            from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

            keys, certs = [], []
            for t in self.pems:
                if t.kind == "key":
                    keys.append(serialization.load_pem_public_key(t.pem))
                else:
                    certs.append(x509.load_pem_x509_certificate(t.pem))
            self._loaded = (keys, certs)
        return self._loaded

    def verify(self, capture: os.PathLike, data, kind: str, modules_dir: Optional[os.PathLike]) -> dict:
        """The verdict on one capture (``schema/SIGNATURE-RULES.md``, steps 1 to 6).

        Args:
            capture: The capture's path as given (its name is its resource name).
            data: The capture file's bytes (the buffer that will be decoded).
            kind: ``"wrp"``, ``"wrpk"`` or ``"json"``.
            modules_dir: A ``.wrp``'s modules folder (None for the others).

        Returns:
            ``{file name: bytes}`` of the module files it hashed: load exactly these.

        Raises:
            WrpSignatureError: Unsigned, malformed, signed by no trusted key, or changed after signing.
            WrpIOError: The signature or a module file exists but cannot be read.
        """
        capture = Path(capture)
        sig_path = self.signature if self.signature is not None else default_signature_path(capture)
        raw = _read_signature(sig_path)
        envelope = parse_bundle(raw, sig_path)
        statement = self._signed_payload(envelope, sig_path)
        resources = parse_statement(statement, sig_path)
        name = capture.name
        if name not in resources:
            raise WrpSignatureError(f"not covered by the signature: {name} is not among the {len(resources)} "
                                    f"file(s) {sig_path} signs",
                                    hint="The signature is of other files: sign this capture with `wrp sign`.")
        if _sha256(data).hexdigest() != resources[name]:
            raise WrpSignatureError(f"changed after signing: {name}", hint=TAMPER_HINT)
        if kind != "wrp":
            return {}
        return _check_modules(capture, Path(modules_dir) if modules_dir is not None else None, resources)

    def _signed_payload(self, envelope: "Envelope", sig_path: Path) -> bytes:
        """Step 3: the payload, once a trusted key verifies its signature."""
        from cryptography import exceptions  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

        keys, certs = self._objects()
        signed = pae(envelope.payload_type.encode(), envelope.payload)
        if envelope.certificates is not None:
            who = "sha256:" + _sha256(envelope.certificates[0]).hexdigest()[:16]
            candidates = _chained_key(envelope.certificates, certs)
        else:
            who = "sha256:" + envelope.hint[:16] if envelope.hint else None
            candidates = [k for k in keys if envelope.hint is None or fingerprint(k) == envelope.hint]
        for key in candidates:
            if not isinstance(key, ec.EllipticCurvePublicKey):
                continue
            try:
                key.verify(envelope.sig, signed, ec.ECDSA(_curve_hash(key)))
                return envelope.payload
            except (exceptions.InvalidSignature, ValueError):
                continue
        by = f"was signed by {who}" if who else "was signed with no key hint"
        raise WrpSignatureError(f"not signed by a trusted key: {sig_path} {by} ({len(self.pems)} trusted key(s))",
                                hint="Pass the public key (or CA certificate) of whoever signed it with "
                                     "--trusted-key, or get the capture from a trusted source.")


def fingerprint(public_key) -> str:
    """A public key's fingerprint: SHA-256 hex of its SubjectPublicKeyInfo PEM (model-signing's key ``hint``)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    pem = public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _sha256(pem).hexdigest()


def _curve_hash(key):
    from cryptography.hazmat.primitives import hashes  # noqa: PLC0415

    return {256: hashes.SHA256, 384: hashes.SHA384, 521: hashes.SHA512}.get(key.curve.key_size, hashes.SHA256)()


def _chained_key(chain: list, trusted_certs: list) -> list:
    """The signer certificate's public key, as a one-element list, when it chains to a trusted
    certificate as of its notBefore time and may sign; else ``[]``."""
    if not trusted_certs:
        return []
    from cryptography import x509  # noqa: PLC0415
    from cryptography.x509 import oid  # noqa: PLC0415
    from OpenSSL import crypto  # noqa: PLC0415

    try:
        certs = [x509.load_der_x509_certificate(c) for c in chain]
    except ValueError:
        return []
    leaf = certs[0]
    store = crypto.X509Store()
    for c in trusted_certs:
        store.add_cert(crypto.X509.from_cryptography(c))
    store.set_time(leaf.not_valid_before_utc)
    ctx = crypto.X509StoreContext(store, crypto.X509.from_cryptography(leaf),
                                  [crypto.X509.from_cryptography(c) for c in certs[1:]])
    try:
        ctx.verify_certificate()
    except crypto.X509StoreContextError:
        return []
    may_sign = False
    try:
        may_sign = leaf.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
    except x509.ExtensionNotFound:
        pass
    if not may_sign:
        try:
            may_sign = oid.ExtendedKeyUsageOID.CODE_SIGNING in \
                leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except x509.ExtensionNotFound:
            pass
    return [leaf.public_key()] if may_sign else []


def _pem_blocks(data: bytes, source: str) -> list:
    out = []
    for m in _PEM.finditer(data):
        label = m.group(1).decode()
        if label == "PUBLIC KEY":
            out.append(TrustedPem("key", m.group(0) + b"\n", source))
        elif label == "CERTIFICATE":
            out.append(TrustedPem("cert", m.group(0) + b"\n", source))
        elif "PRIVATE KEY" in label:
            raise WrpUsageError(f"trusted key {source} holds a private key, not a public one",
                                hint=f"Pass its public key: `openssl ec -in {source} -pubout -out PUB.pem`.")
    return out


def _read_pems(path: Path) -> list:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise WrpUsageError(f"trusted key not found: {path}", hint="Check the path.") from None
    except IsADirectoryError:
        raise WrpUsageError(f"trusted key {path} is a folder", hint="Pass a folder with --trusted-keys.") from None
    except OSError as e:
        raise WrpUsageError(f"cannot read trusted key {path}: {e.strerror}") from None
    pems = _pem_blocks(data, str(path))
    if not pems:
        raise WrpUsageError(f"trusted key {path} holds no PEM public key or certificate",
                            hint="Pass an EC public key (`openssl ec -in KEY.pem -pubout`) or a CA certificate.")
    _check_loadable(pems)
    return pems


def _read_pem_dir(path: Path) -> list:
    if not path.is_dir():
        raise WrpUsageError(f"trusted keys folder not found: {path}" if not path.exists()
                            else f"trusted keys folder {path} is not a folder", hint="Check the path.")
    files = sorted(p for p in path.iterdir() if p.suffix == ".pem" and p.is_file())
    if not files:
        raise WrpUsageError(f"trusted keys folder {path} holds no *.pem file")
    return [pem for f in files for pem in _read_pems(f)]


def _check_loadable(pems: list) -> None:
    """Refuse a trusted PEM that does not parse, or a key that is not on a supported EC curve."""
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    for t in pems:
        try:
            obj = (serialization.load_pem_public_key(t.pem) if t.kind == "key"
                   else x509.load_pem_x509_certificate(t.pem).public_key())
        except ValueError as e:
            raise WrpUsageError(f"trusted key {t.source} does not parse: {e}") from None
        if t.kind == "key" and not (isinstance(obj, ec.EllipticCurvePublicKey)
                                    and obj.curve.name in ("secp256r1", "secp384r1", "secp521r1")):
            raise WrpUsageError(f"trusted key {t.source} is not an EC key on P-256, P-384 or P-521",
                                hint="Make one with `openssl ecparam -name prime256v1 -genkey`.")


# ---------------------------------------------------------------------------
# The bundle and the statement
# ---------------------------------------------------------------------------


@record
class Envelope:
    """The parts of a bundle that step 3 needs."""

    payload_type: str
    payload: bytes
    sig: bytes
    hint: Optional[str]
    certificates: Optional[list]


def pae(payload_type: bytes, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the signature signs."""
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type, len(payload), payload)


def _read_signature(path: Path) -> bytes:
    """Step 1: the signature file's bytes, at most :data:`MAX_SIGNATURE_BYTES` (step 2's cap)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise WrpSignatureError(f"not signed: no signature file {path}", hint=SIGN_HINT) from None
    except OSError as e:
        raise WrpIOError(f"cannot read signature {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WrpSignatureError(f"signature malformed: {path}: not a regular file")
        if st.st_size > MAX_SIGNATURE_BYTES:
            raise WrpSignatureError(f"signature malformed: {path}: {st.st_size} bytes, over the "
                                    f"{MAX_SIGNATURE_BYTES >> 20} MiB a signature may hold")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_SIGNATURE_BYTES + 1)
    except OSError as e:
        raise WrpIOError(f"cannot read signature {path}: {e.strerror}") from None
    finally:
        os.close(fd)


class _Malformed(ValueError):
    pass


def _json_depth_ok(raw: bytes) -> bool:
    """Whether no bracket nests deeper than :data:`MAX_JSON_DEPTH` (strings skipped)."""
    depth, in_str, esc = 0, False, False
    for b in raw:
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:
                esc = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif b in (0x5D, 0x7D):
            depth -= 1
    return True


def _json(raw: bytes, what: str):
    import json  # noqa: PLC0415  (imported with a signature to read: `wrp inspect` of an unsigned capture never is)

    if not _json_depth_ok(raw):
        raise _Malformed(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _Malformed(f"{what} is not JSON ({e})") from None


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _get(obj, key: str, kind, where: str):
    if not isinstance(obj, dict):
        raise _Malformed(f"{where} is not an object")
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _Malformed(f"{where}.{key} is missing or not {_KINDS.get(kind, kind)}")
    return value


_KINDS = {str: "a string", dict: "an object", list: "an array"}


def _b64(text: str, where: str) -> bytes:
    import base64  # noqa: PLC0415  (as json in _json)
    import binascii  # noqa: PLC0415

    raw = text.encode("ascii", "replace")
    if len(raw) % 4 or not _B64.fullmatch(raw):
        raise _Malformed(f"{where} is not base64")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise _Malformed(f"{where} is not base64") from None


def parse_bundle(raw: bytes, sig_path) -> Envelope:
    """Step 2: a bundle's envelope, every field checked.

    Raises:
        WrpSignatureError: ``signature malformed: PATH: DETAIL``.
    """
    try:
        if len(raw) > MAX_SIGNATURE_BYTES:
            raise _Malformed(f"over the {MAX_SIGNATURE_BYTES >> 20} MiB a signature may hold")
        doc = _json(raw, "the bundle")
        if not isinstance(doc, dict):
            raise _Malformed("the bundle is not a JSON object")
        media = _get(doc, "mediaType", str, "bundle")
        if not media.startswith(BUNDLE_MEDIA_PREFIX):
            raise _Malformed(f"mediaType {media[:80]!r} is not a Sigstore bundle")
        env = _get(doc, "dsseEnvelope", dict, "bundle")
        ptype = _get(env, "payloadType", str, "dsseEnvelope")
        if ptype != PAYLOAD_TYPE:
            raise _Malformed(f"payloadType {ptype[:80]!r} is not {PAYLOAD_TYPE}")
        payload = _b64(_get(env, "payload", str, "dsseEnvelope"), "dsseEnvelope.payload")
        sigs = _get(env, "signatures", list, "dsseEnvelope")
        if not sigs:
            raise _Malformed("dsseEnvelope.signatures is empty")
        sig = _b64(_get(sigs[0], "sig", str, "dsseEnvelope.signatures[0]"), "dsseEnvelope.signatures[0].sig")
        if not 1 <= len(sig) <= MAX_SIG_BYTES:
            raise _Malformed(f"dsseEnvelope.signatures[0].sig is {len(sig)} bytes, not 1 to {MAX_SIG_BYTES}")
        material = _get(doc, "verificationMaterial", dict, "bundle")
        hint, certs = None, None
        if "publicKey" in material:
            pk = _get(material, "publicKey", dict, "verificationMaterial")
            if "hint" in pk:
                hint = _get(pk, "hint", str, "verificationMaterial.publicKey")
                if not _HEX64.fullmatch(hint):
                    raise _Malformed("verificationMaterial.publicKey.hint is not 64 lowercase hex digits")
        elif "x509CertificateChain" in material:
            chain = _get(material, "x509CertificateChain", dict, "verificationMaterial")
            items = _get(chain, "certificates", list, "verificationMaterial.x509CertificateChain")
            if not items:
                raise _Malformed("verificationMaterial.x509CertificateChain.certificates is empty")
            certs = [_b64(_get(c, "rawBytes", str, f"certificates[{i}]"), f"certificates[{i}].rawBytes")
                     for i, c in enumerate(items)]
        else:
            raise _Malformed("verificationMaterial has neither publicKey nor x509CertificateChain")
        return Envelope(ptype, payload, sig, hint, certs)
    except _Malformed as e:
        raise WrpSignatureError(f"signature malformed: {sig_path}: {e}",
                                hint="Sign the capture again with `wrp sign` (or `model_signing sign`).") from None


def parse_statement(payload: bytes, sig_path) -> dict:
    """Step 4: ``{resource name: sha256 hex}`` of a verified payload.

    Raises:
        WrpSignatureError: ``signature malformed: PATH: DETAIL``.
    """
    try:
        doc = _json(payload, "the statement")
        if not isinstance(doc, dict):
            raise _Malformed("the statement is not a JSON object")
        if _get(doc, "_type", str, "statement") != STATEMENT_TYPE:
            raise _Malformed(f"statement _type is not {STATEMENT_TYPE}")
        if _get(doc, "predicateType", str, "statement") != PREDICATE_TYPE:
            raise _Malformed(f"predicateType is not {PREDICATE_TYPE}")
        subjects = _get(doc, "subject", list, "statement")
        if len(subjects) != 1:
            raise _Malformed(f"statement has {len(subjects)} subjects, not 1")
        root = _get(_get(subjects[0], "digest", dict, "subject[0]"), "sha256", str, "subject[0].digest")
        if not _HEX64.fullmatch(root):
            raise _Malformed("subject[0].digest.sha256 is not 64 lowercase hex digits")
        predicate = _get(doc, "predicate", dict, "statement")
        method = _get(_get(predicate, "serialization", dict, "predicate"), "method", str, "predicate.serialization")
        if method != "files":
            raise _Malformed(f"serialization method {method[:40]!r} is not 'files' (sign without --shard)")
        resources = _get(predicate, "resources", list, "predicate")
        if len(resources) > MAX_RESOURCES:
            raise _Malformed(f"{len(resources)} resources, over {MAX_RESOURCES}")
        out, hasher = {}, _sha256()
        for i, r in enumerate(resources):
            where = f"resources[{i}]"
            name = _get(r, "name", str, where)
            if _get(r, "algorithm", str, where) != "sha256":
                raise _Malformed(f"{where}.algorithm is not sha256")
            digest = _get(r, "digest", str, where)
            if not _HEX64.fullmatch(digest):
                raise _Malformed(f"{where}.digest is not 64 lowercase hex digits")
            problem = _name_problem(name)
            if problem:
                raise _Malformed(f"{where}.name {name[:80]!r} {problem}")
            if name in out:
                raise _Malformed(f"{where}.name {name[:80]!r} is listed twice")
            out[name] = digest
            hasher.update(bytes.fromhex(digest))
        if hasher.hexdigest() != root:
            raise _Malformed("subject digest does not match the resources' digests")
        return out
    except _Malformed as e:
        raise WrpSignatureError(f"signature malformed: {sig_path}: {e}",
                                hint="Sign the capture again with `wrp sign` (or `model_signing sign`).") from None


def _name_problem(name: str) -> Optional[str]:
    raw = name.encode("utf-8", "surrogatepass")
    if not 1 <= len(raw) <= MAX_NAME_BYTES:
        return f"is not 1 to {MAX_NAME_BYTES} bytes"
    if "\0" in name or "\\" in name:
        return "holds a NUL or a backslash"
    if name.startswith("/"):
        return "is absolute"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "has an empty, '.' or '..' part"
    return None


# ---------------------------------------------------------------------------
# The files
# ---------------------------------------------------------------------------


def module_entries(modules_dir: Optional[Path]) -> list:
    """The names of a modules folder's entries that are not folders (the signed set's module files)."""
    if modules_dir is None:
        return []
    try:
        with os.scandir(modules_dir) as it:
            return sorted(e.name for e in it if not e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise WrpIOError(f"cannot list modules folder {modules_dir}: {e.strerror}") from None


def _read_entry(path: Path) -> Optional[bytes]:
    """A module file's bytes, or None when it is not a regular file (never followed, never blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if os.path.islink(path):
            return None
        raise WrpIOError(f"cannot read module file {path}: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while True:
            b = os.read(fd, 1 << 24)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    except OSError as e:
        raise WrpIOError(f"cannot read module file {path}: {e.strerror}") from None
    finally:
        os.close(fd)


def _check_modules(capture: Path, modules_dir: Optional[Path], resources: Mapping) -> dict:
    """Step 6: every module entry signed and unchanged, none added or removed."""
    prefix = modules_prefix(capture)
    signed = {n[len(prefix):]: d for n, d in resources.items() if n.startswith(prefix)}
    on_disk = set(module_entries(modules_dir))
    out = {}
    for entry in sorted(set(signed) | on_disk):
        name = prefix + entry
        if entry not in on_disk:
            raise WrpSignatureError(f"removed after signing: {name}", hint=TAMPER_HINT)
        if entry not in signed:
            raise WrpSignatureError(f"added after signing: {name}", hint=TAMPER_HINT)
        data = _read_entry(modules_dir / entry)
        if data is None or _sha256(data).hexdigest() != signed[entry]:
            raise WrpSignatureError(f"changed after signing: {name}" + (" (not a regular file)" if data is None
                                                                         else ""), hint=TAMPER_HINT)
        out[entry] = data
    return out


def verify_path(trust: Optional[Trust], capture, modules_dir=None) -> None:
    """The verdict on a capture file, for a command whose replay then reads it in another process.

    Does nothing when ``trust`` is None.  (A command that decodes or loads in this process passes
    ``trust`` to :func:`~wrpkit.formats.container.open_capture` instead, so that what is checked is
    what is read.)

    Raises:
        WrpSignatureError, WrpIOError: As :meth:`Trust.verify`.
    """
    if trust is None:
        return
    from ..file_reads import map_file  # noqa: PLC0415
    from ..module_dirs import find_modules_dir  # noqa: PLC0415
    from .wrp1 import sniff  # noqa: PLC0415

    with map_file(capture, "capture", follow_symlinks=True) as mapped:
        kind = sniff(mapped.buffer)
        mods = (Path(modules_dir) if modules_dir is not None else find_modules_dir(capture)) if kind == "wrp" else None
        trust.verify(capture, mapped.buffer, kind, mods)


def describe(capture: os.PathLike, signature=None) -> Optional[dict]:
    """What a capture's signature says of its signer, unverified (for ``wrp inspect``).

    Returns:
        None when there is no signature file; else ``{"path", "key"}`` (the key's or signer
        certificate's ``sha256:`` fingerprint, or None) or ``{"path", "error"}`` when it is malformed.
    """
    path = Path(signature) if signature is not None else default_signature_path(capture)
    try:
        env = parse_bundle(_read_signature(path), path)
    except WrpSignatureError as e:
        if e.message.startswith("not signed"):
            return None
        return {"path": str(path), "error": e.message}
    except WrpIOError as e:
        return {"path": str(path), "error": e.message}
    if env.certificates is not None:
        return {"path": str(path), "kind": "certificate",
                "key": "sha256:" + _sha256(env.certificates[0]).hexdigest()}
    return {"path": str(path), "kind": "key", "key": "sha256:" + env.hint if env.hint else None}


__all__ = ["ENVIRONMENT", "Trust", "TrustedPem", "TRUST_ENV", "default_signature_path", "describe", "fingerprint",
           "parse_bundle", "parse_statement", "pae", "verify_path"]
