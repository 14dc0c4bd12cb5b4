"""The finding every validation check returns: where, what, and how bad.

Every module of the validator (:mod:`wrpkit.checks.validate` and the checks it
composes, :mod:`wrpkit.checks.module_files`) reports a :class:`Problem`, so
that ``wrp validate`` can list them all.
"""

from __future__ import annotations

from typing import Optional

from ..records import record


@record(frozen=True)
class Problem:
    """One validation finding.

    Attributes:
        where: Dotted path of the record, e.g. ``"ops[3].then[0]"``.
        message: What is wrong.
        offset: Byte offset of the record in the file, when known.
        severity: ``"error"`` (the file is refused) or ``"warning"``.
    """

    where: str
    message: str
    offset: Optional[int] = None
    severity: str = "error"

    def __str__(self) -> str:
        at = f" at byte {self.offset}" if self.offset is not None and self.offset >= 0 else ""
        return f"{self.where}{at}: {self.message}"
