"""``wrp sign``: sign a capture and its module files as a whole (an OpenSSF model-signing signature)."""

from __future__ import annotations

import click

from .output import dump_json, escape, console


@click.command()
@click.argument("capture", type=click.Path(exists=True, dir_okay=False))
@click.option("--key", "key", required=True, type=click.Path(dir_okay=False), metavar="PRIVATE.pem",
              help="The EC private key (P-256, P-384 or P-521, PEM) to sign with.")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), metavar="SIG",
              help="Where to write the signature (default: STEM.sig beside the capture).")
@click.option("--certificate", type=click.Path(dir_okay=False), metavar="CERT.pem",
              help="Sign with a certificate: the key's certificate; verifiers then trust its CA.")
@click.option("--chain", multiple=True, type=click.Path(dir_okay=False), metavar="CA.pem",
              help="With --certificate: the certificates between it and the root (repeatable).")
@click.option("--modules-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Folder of the .wrp's module files (default: <stem>_modules/ beside it).")
@click.option("--json", "as_json", is_flag=True, help="Print what was signed as JSON.")
def sign(capture, key, output, certificate, chain, modules_dir, as_json):
    """Sign CAPTURE (.wrp with its <stem>_modules/, or one .wrpk) with a private key.

    \b
    The signature is an OpenSSF model-signing bundle over the SHA-256 of the
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
    from ..formats import wrp1  # noqa: PLC0415
    from ..formats.signing import sign_capture  # noqa: PLC0415
    with open(capture, "rb") as f:
        head = f.read(64)
    kind = wrp1.sniff(head)
    kind = "json" if kind == "unknown" and head.lstrip().startswith(b"{") else kind
    if kind == "unknown":
        from ..errors import WrpFormatError  # noqa: PLC0415

        raise WrpFormatError(f"{capture} is not a Warp capture (.wrp, .wrpk or .json)",
                             hint="Sign a .wrp written by wp.capture_save, or a .wrpk or .json written by wrpkit.")
    res = sign_capture(capture, key, kind=kind, signature=output, modules_dir=modules_dir, certificate=certificate,
                       chain=chain)
    if as_json:
        dump_json({"capture": str(capture), "signature": str(res.signature), "files": res.files, "key": res.key})
        return
    modules = len(res.files) - 1
    console().print(f"signed {escape(capture)}" + (f" and {modules} module file(s)" if kind == "wrp" else "")
                    + f" -> {escape(str(res.signature))} (key {res.key[:23]}…)", highlight=False)
