"""``wrp sign``: sign a capture and its module files as a whole (an OpenSSF model-signing signature)."""

from __future__ import annotations

import click

from .options import UserPath
from .output import dump_json, escape, console


@click.command()
@click.argument("capture", type=UserPath(exists=True, dir_okay=False))
@click.option("--key", "key", required=True, type=UserPath(dir_okay=False), metavar="PRIVATE.pem",
              help="The EC private key (P-256, P-384 or P-521, PEM) to sign with.")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), metavar="SIG",
              help="Where to write the signature (default: STEM.sig beside the capture).")
@click.option("--certificate", type=UserPath(dir_okay=False), metavar="CERT.pem",
              help="Sign with a certificate: the key's certificate; verifiers then trust its CA.")
@click.option("--chain", multiple=True, type=UserPath(dir_okay=False), metavar="CA.pem",
              help="With --certificate: the certificates between it and the root (repeatable).")
@click.option("--modules-dir", type=UserPath(file_okay=False), metavar="DIR",
              help="Folder of the .wrp's module files (default: <stem>_modules/ beside it).")
@click.option("--json", "as_json", is_flag=True, help="Print what was signed as JSON.")
def sign(capture, key, output, certificate, chain, modules_dir, as_json):
    """Sign CAPTURE (.wrp with its <stem>_modules/, or one .wrpk) with a private key.

    \b
    CAPTURE is validated first, as `wrp validate` does: an invalid capture is
    refused (exit 3), never signed.

    \b
    CAPTURE is validated first, as `wrp validate` does: an invalid capture is
    refused (exit 3), never signed.  The signature is an OpenSSF model-signing bundle over the SHA-256 of the
    capture's file and of every module file beside it: `model_signing verify`
    accepts it, and every wrp command (and wrp-replay) given --trusted-key
    with the public key refuses the capture, before loading anything, if a
    byte of it changed or a module file was added or removed.  The signature
    is written atomically.

    \b
    Examples:
      openssl ecparam -name prime256v1 -genkey -noout -out key.pem
      openssl ec -in key.pem -pubout -out pub.pem
      wrp sign step.wrp --key key.pem                 # writes step.sig
      wrp replay step.wrp --trusted-key pub.pem       # exit 3 if tampered
      wrp-replay step.wrp --trusted-key pub.pem
      wrp sign step.wrpk --key leaf.key --certificate leaf.pem --chain ca.pem
    """
    from ..checks.validate import validate_capture  # noqa: PLC0415
    from ..errors import WrpValidationError  # noqa: PLC0415
    from ..formats.container import open_capture  # noqa: PLC0415
    from ..formats.signing import sign_capture  # noqa: PLC0415

    with open_capture(capture, modules_dir=modules_dir, thorough=True) as cap:
        kind = cap.kind
        errors = [p for p in validate_capture(cap) if p.severity == "error"]
    if errors:
        raise WrpValidationError([str(p) for p in errors],
                                 hint=f"Only a valid capture is signed: `wrp validate {capture}` lists every problem.")
    res = sign_capture(capture, key, kind=kind, signature=output, modules_dir=modules_dir, certificate=certificate,
                       chain=chain)
    if as_json:
        dump_json({"capture": str(capture), "signature": str(res.signature), "files": res.files, "key": res.key})
        return
    modules = len(res.files) - 1
    console().print(f"signed {escape(capture)}" + (f" and {modules} module file(s)" if kind == "wrp" else "")
                    + f" -> {escape(str(res.signature))} (key {res.key[:23]}…)", highlight=False)
