"""Feed hostile variants to wrpkit.load / Program.run and `wrp replay`, in a child process.

Usage: python hostile_runner.py LISTFILE
LISTFILE holds one variant path per line.  For each it prints one line,
flushed before the next variant starts, so that a crash (a signal kills the
process) is pinned on the variant that caused it:

    START <path>
    LOAD  <path> accept|refuse <ErrorType> | unexpected <ExceptionType>: <msg>
    CLI   <path> <exit code> <clean|traceback|left-output>
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def main() -> int:
    import warp as wp

    wp.config.log_level = getattr(wp, "LOG_ERROR", 40)
    from click.testing import CliRunner

    import wrpkit
    from wrpkit.cli import main as cli
    from wrpkit.errors import WrpError

    paths = Path(sys.argv[1]).read_text().split("\n")
    out_dir = Path(tempfile.mkdtemp(prefix="wrpkit-hostile-out-"))
    runner = CliRunner()
    for p in filter(None, paths):
        print("START", p, flush=True)
        try:
            prog = wrpkit.load(p)
            prog.run()
            print("LOAD", p, "accept", flush=True)
        except WrpError as e:
            print("LOAD", p, "refuse", type(e).__name__, flush=True)
        except Exception as e:  # noqa: BLE001
            print("LOAD", p, "unexpected", f"{type(e).__name__}: {str(e)[:200]!r}", flush=True)
        out = out_dir / "o.npz"
        res = runner.invoke(cli, ["replay", p, "--output", str(out)])
        text = res.output
        state = "clean"
        if "Traceback" in text or (res.exception is not None and not isinstance(res.exception, SystemExit)):
            state = "traceback"
        elif res.exit_code != 0 and out.exists():
            state = "left-output"
        if out.exists():
            os.unlink(out)
        print("CLI", p, res.exit_code, state, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
