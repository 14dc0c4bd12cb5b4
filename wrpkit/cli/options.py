"""Option types and helpers the commands share: ``--timeout`` seconds and its watchdog, the inputs,
``--kernels`` and trust (``--trusted-key``) options, and the lines that say what ``--kernels`` typed."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
from pathlib import Path

import click

from ..deadline import Deadline
from ..errors import EXIT_TIMEOUT, WrpBindingError, WrpIOError


class UserPath(click.Path):
    """``click.Path`` for a path the user typed; whether it can be read is wrpkit's to say, not click's.

    click's own checks would call a file this user may not read a usage error
    ("Invalid value: ... is not readable", exit 2), and a path inside a folder
    this user may not search "does not exist".  Both are I/O errors (exit 1,
    :mod:`wrpkit.errors`): readability is left to the command, which opens the
    file and names the operating system's reason; with ``exists``, a path that
    cannot be looked at (other than missing) is reported so here.  A missing
    path stays a usage error (exit 2), as click words it.
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("readable", False)
        super().__init__(**kwargs)

    def convert(self, value, param, ctx):
        if self.exists and not (self.allow_dash and value in ("-", b"-")):
            try:
                os.stat(value)
            except (FileNotFoundError, NotADirectoryError):
                pass  # click says it does not exist (exit 2)
            except OSError as e:
                raise WrpIOError(f"cannot read {os.fsdecode(value)}: {e.strerror or e}",
                                 hint="Give this user read access to it (and search access to its folders).") \
                    from None
        return super().convert(value, param, ctx)


class Seconds(click.ParamType):
    """A finite number of seconds above 0 (fractional allowed), at most 1e9."""

    name = "seconds"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            v = float(value)
        else:
            try:
                v = float(str(value).strip())
            except ValueError:
                v = math.nan
        if not math.isfinite(v) or v <= 0 or v > 1e9:
            self.fail(f"{value!r} is not a number of seconds above 0 (at most 1e9)", param, ctx)
        return v


class Watchdog:
    """Ends the process with :data:`~wrpkit.errors.EXIT_TIMEOUT` when a command runs past its ``--timeout``.

    Warp replays through ctypes calls, which release the GIL, so a timer
    thread runs while native code loops (a WHILE that does not end) and can
    only stop it with ``os._exit``: a command line's tool, never the
    library's.  The library is handed it (``disarm``, ``deadline``) and
    disarms it before it starts a child process that keeps the same deadline
    itself, and before anything is written, so no output or temporary file is
    left.  A lock makes :meth:`disarm` final: once it returns, the process is
    never ended by the watchdog.

    Args:
        seconds: The timeout from now, or None for none.
        replays: Replays asked for, named in the timeout's message.

    Attributes:
        deadline: The command's one :class:`~wrpkit.deadline.Deadline` (None without a timeout).
    """

    def __init__(self, seconds, replays: int = 1):
        self.deadline = Deadline.after(seconds, replays)
        self._lock = threading.Lock()
        self._armed = seconds is not None
        self._timer = None
        if self._armed:
            self._timer = threading.Timer(seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self):
        with self._lock:
            if not self._armed:
                return
            err = self.deadline.error()
            text = f"error: {err.message}\nhint: {err.hint}\n".encode()
            with contextlib.suppress(OSError):
                os.write(2, text)
            os._exit(EXIT_TIMEOUT)

    def disarm(self):
        """Stop the timer for good (idempotent)."""
        with self._lock:
            self._armed = False
        if self._timer is not None:
            self._timer.cancel()


def name_items(items, option: str, value_name: str, example: str) -> dict:
    """``{NAME: VALUE}`` of repeated ``NAME=VALUE`` options (later ones win).

    Args:
        items: The option's values as given.
        option: The option, for messages (``--input``).
        value_name: What the value is, for messages (``FILE.npy``).
        example: An example of the option, for the hint.

    Raises:
        WrpBindingError: An item is not of the form NAME=VALUE.
    """
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise WrpBindingError(f"{option} {item!r} is not of the form NAME={value_name}",
                                  hint=f"For example {example}.")
        out[name] = value
    return out


def input_options(fn):
    """``--inputs IN.npz`` and ``--input NAME=X.npy`` (repeatable), as ``wrp replay`` has them."""
    fn = click.option("--input", "input_items", multiple=True, metavar="NAME=X.npy",
                      help="One input (repeatable).")(fn)
    return click.option("--inputs", "inputs_npz", type=UserPath(path_type=Path), metavar="IN.npz",
                        help="Inputs keyed by binding name.")(fn)


def kernels_option(fn):
    """``--kernels FILE.py`` (repeatable): type a stock capture's kernels from the user's source."""
    return click.option("--kernels", "kernels", multiple=True, metavar="FILE.py",
                        type=UserPath(dir_okay=False, path_type=Path),
                        help="The .py file that defines the capture's kernels (repeatable): imported as a script "
                             "without its __main__ block; every matching kernel types the arrays it is passed.")(fn)


def trust_options(fn):
    """``--trusted-key PEM`` (repeatable), ``--trusted-keys DIR`` and ``--signature PATH``, given to the
    command as one ``trust`` argument: a :class:`~wrpkit.formats.signature.Trust`, or None when neither
    the options nor ``WRPKIT_TRUSTED_KEYS`` ask for a signature (``schema/SIGNATURE-RULES.md``)."""

    @functools.wraps(fn)
    def with_trust(*args, trusted_key=(), trusted_keys=(), signature=None, **kwargs):
        from ..formats.signature import Trust  # noqa: PLC0415

        return fn(*args, trust=Trust.resolve(list(trusted_key), list(trusted_keys), signature), **kwargs)

    with_trust = click.option("--signature", type=UserPath(dir_okay=False), metavar="SIG",
                              help="The capture's signature, when it is not STEM.sig beside it.")(with_trust)
    with_trust = click.option("--trusted-keys", "trusted_keys", multiple=True, metavar="DIR",
                              type=UserPath(file_okay=False),
                              help="A folder of trusted *.pem keys or CA certificates (repeatable).")(with_trust)
    return click.option("--trusted-key", "trusted_key", multiple=True, metavar="PEM",
                        type=UserPath(dir_okay=False),
                        help="Require a signature by this EC public key or CA certificate (repeatable; default: "
                             "WRPKIT_TRUSTED_KEYS). Checked before anything is loaded; exit 3 when unsigned, "
                             "untrusted or changed.")(with_trust)


def refuse_signing_in_place(dst, key) -> None:
    """Before any work: ``--key`` signs a file that stays where it is written, which a device, a FIFO
    or ``/dev/stdout`` is not (the output itself is written there in place: wrpkit.special_outputs).

    Raises:
        WrpUsageError: ``key`` is given and ``dst`` is such a special file (exit 2).
    """
    if key is None:
        return
    from ..special_outputs import special_output  # noqa: PLC0415

    kind = special_output(dst)
    if kind is not None:
        from ..errors import WrpUsageError  # noqa: PLC0415

        raise WrpUsageError(f"cannot sign {dst}: it is {kind}, not a file the signature could be checked against "
                            "later", hint="Write a regular file to sign it, or leave out --key.")


def resign(src, dst, form: str, key, quiet: bool):
    """After a command wrote ``dst`` from ``src``: sign it with ``key``, or note that a signed
    ``src``'s signature does not carry over to the new file.  Returns the signature's path or None."""
    from ..formats.signature import describe  # noqa: PLC0415

    if key is not None:
        from ..formats.signing import sign_capture  # noqa: PLC0415

        return str(sign_capture(dst, key, kind=form).signature)
    if not quiet and describe(src) is not None:
        from .output import stderr_console  # noqa: PLC0415

        stderr_console().print(f"note: {src} is signed; {dst} is a new file and is not (sign it with "
                               f"`wrp sign {dst} --key KEY.pem`, or pass --key)", markup=False, highlight=False)
    return None


def kernel_match_lines(typing: dict) -> list:
    """A line saying how many kernels ``--kernels`` typed, then each that did not match, with the reason.

    The lines are rich markup (names from the file are escaped).
    """
    from .output import escape  # noqa: PLC0415

    if not typing:
        return []
    n = sum(1 for k in typing["kernels"] if k["matched"])
    names = ", ".join(Path(f).name for f in typing["files"])
    out = [f"--kernels: {n} of {len(typing['kernels'])} kernel(s) typed from {escape(names)}"]
    for k in typing["kernels"]:
        if not k["matched"]:
            out.append(f"[yellow]--kernels:[/] kernel {escape(k['kernel'])} (module {escape(k['module'])}) not typed: "
                       f"{escape(k['reason'])}")
        elif k["code"] == "changed":
            out.append(f"[yellow]--kernels:[/] kernel {escape(k['kernel'])}: its code in {escape(k['file'])} differs from the "
                       "captured one (types taken from the file; its argument layout matches)")
    return out


def gather_inputs(inputs_npz, input_items) -> dict:
    """``{binding name: np.ndarray}`` from ``--inputs`` and ``--input`` (later ones win).

    Raises:
        WrpBindingError: A file cannot be read, or an item is not NAME=FILE.
    """
    from ..numpy_files import load_npy, load_npz  # noqa: PLC0415

    out = {}
    if inputs_npz is not None:
        out.update(load_npz(Path(inputs_npz)))
    for name, path in name_items(input_items, "--input", "FILE.npy", "--input x=x.npy").items():
        out[name] = load_npy(Path(path))
    return out


def quiet_warp(device=None) -> None:
    """Start Warp without its banner, and on the CPU without the "no CUDA driver" warning.

    Args:
        device: The device the command will use; ``None`` means the capture's own
            family, which is not known yet, so only the banner is turned off.
    """
    if device is None:
        # Warp is started later, by the library, on the capture's device.
        from ..run.warp_bridge.start import quiet_banner  # noqa: PLC0415

        quiet_banner()
        return
    from ..run.warp_bridge.start import init_warp  # noqa: PLC0415

    init_warp(cpu_only=str(device).strip().lower() == "cpu")
