"""Signing a capture: a model-signing (OMS) signature over its signed set.

The signature is made by the ``model-signing`` package itself (the open format's reference
implementation), over exactly the files ``schema/SIGNATURE-RULES.md`` calls the capture's signed
set, so that ``model_signing verify`` accepts it and :meth:`wrpkit.formats.signature.Trust.verify`
does too.  This is the one place that reaches into model-signing; ``tests/signing/test_signing.py`` fails
when a new release moves what it uses (the version is pinned).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from ..records import record
from ..errors import WrpError, WrpUsageError
from ..atomic_writes import atomic_write
from ..module_dirs import find_modules_dir
from .signature import default_signature_path, modules_prefix, module_entries


@record
class Signed:
    """What :func:`sign_capture` wrote.

    Attributes:
        signature: The signature file.
        files: The signed files' resource names.
        key: The signer's ``sha256:`` fingerprint (model-signing's key hint, or the certificate's).
    """

    signature: Path
    files: list
    key: str


def signed_set(capture: Path, kind: str, modules_dir: Optional[Path]) -> list:
    """``[(resource name, path)]`` of a capture's signed set (rules: "The signed set")."""
    files = [(capture.name, capture)]
    if kind == "wrp" and modules_dir is not None:
        prefix = modules_prefix(capture)
        files += [(prefix + e, modules_dir / e) for e in module_entries(modules_dir)]
    return files


def sign_capture(capture, key, *, kind: str, signature=None, modules_dir=None, certificate=None,
                 chain: Sequence = (), password: Optional[str] = None) -> Signed:
    """Sign a capture as a whole: its file and every module file of its folder, by digest.

    Args:
        capture: The ``.wrp``, ``.wrpk`` or ``.json``.
        key: The EC private key (PEM; P-256, P-384 or P-521).
        kind: The capture's container, ``"wrp"``, ``"wrpk"`` or ``"json"``.
        signature: Where to write the signature (default ``STEM.sig`` beside the capture).
        modules_dir: A ``.wrp``'s modules folder (default ``STEM_modules/`` beside it).
        certificate: The signer's certificate (PEM) for certificate signing, or None for a key.
        chain: Further certificates (PEM) up to, not always including, the root.
        password: The private key's password, if it is encrypted.

    Returns:
        A :class:`Signed`.

    Raises:
        WrpUsageError: The key or certificate cannot be used (missing, not EC, not matching).
        WrpError: A file of the capture cannot be read, or model-signing is not installed.
    """
    capture = Path(capture)
    if kind == "wrp":
        modules_dir = Path(modules_dir) if modules_dir is not None else find_modules_dir(capture)
        if not modules_dir.is_dir():
            modules_dir = None
    dest = Path(signature) if signature is not None else default_signature_path(capture)
    files = signed_set(capture, kind, modules_dir)
    for name, path in files:
        if path.is_symlink() or not path.is_file():
            raise WrpError(f"cannot sign {name}: {path} is not a regular file",
                           hint="Replace the link or special file with a copy of the file, then sign.")
    try:
        from model_signing import hashing  # noqa: PLC0415
        from model_signing._signing import sign_certificate, sign_ec_key  # noqa: PLC0415
        from model_signing._signing.signing import Payload  # noqa: PLC0415
    except ImportError as e:
        raise WrpError(f"signing needs the model-signing package: {e}",
                       hint="pip install 'model-signing==1.1.1' (it comes with wrpkit).") from None
    if certificate is not None and not chain:
        # model-signing's certificate signer needs the chain (and fails on an empty one).
        raise WrpUsageError("--certificate needs --chain: the certificates from it up to the root CA",
                            hint="For a certificate a root CA issued directly, pass that root: --chain ROOT.pem.")
    for what, p in (("private key", key), ("certificate", certificate), *(("certificate", c) for c in chain)):
        if p is not None and not Path(p).is_file():
            raise WrpUsageError(f"{what} not found: {p}", hint="Check the path.")
    try:
        if certificate is None:
            signer = sign_ec_key.Signer(Path(key), password)
        else:
            signer = sign_certificate.Signer(Path(key), Path(certificate), [Path(c) for c in chain])
    except (ValueError, TypeError) as e:
        raise WrpUsageError(f"cannot sign with {key}: {e}",
                            hint="Pass an EC private key in PEM (`openssl ecparam -name prime256v1 -genkey "
                                 "-noout -out KEY.pem`), with its password if it has one.") from None
    root = capture.parent
    # The folder is the model; only the signed set is hashed, and the signature's own name is
    # recorded as ignored, so `model_signing verify` over a folder of its own finds the same set.
    config = hashing.Config().set_ignored_paths(paths=_relative_ignores(root, dest))
    manifest = config.hash(root if root != Path("") else Path("."), files_to_hash=[p for _, p in files])
    bundle = signer.sign(Payload(manifest)).bundle.to_json()
    try:
        atomic_write(dest, [bundle.encode("utf-8")])
    except OSError as e:
        raise WrpError(f"cannot write signature {dest}: {e.strerror}") from None
    return Signed(dest, [n for n, _ in files], _signer_key(signer, certificate))


def _relative_ignores(root: Path, dest: Path) -> list:
    try:
        return [os.path.relpath(dest, root)] if not os.path.relpath(dest, root).startswith("..") else []
    except ValueError:
        return []


def _signer_key(signer, certificate) -> str:
    import hashlib  # noqa: PLC0415

    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    if certificate is not None:
        from cryptography import x509  # noqa: PLC0415

        cert = x509.load_pem_x509_certificate(Path(certificate).read_bytes())
        return "sha256:" + hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
    pub = signer._private_key.public_key()  # model-signing keeps the key it loaded here
    return "sha256:" + hashlib.sha256(pub.public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()


__all__ = ["Signed", "sign_capture", "signed_set"]
