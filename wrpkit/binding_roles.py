"""The roles of a graph's bindings (input, output) as far as a stock binding list tells."""

from __future__ import annotations

from typing import Optional


def binding_split(names: list) -> Optional[tuple]:
    """Where ``capture_save``'s inputs end and its outputs begin in a binding list.

    Warp writes the names of ``inputs=`` and then those of ``outputs=``, each
    a dict (so each run has unique names); a name in both (an in-place
    array) is written twice.  A split ``k`` is valid when ``names[:k]`` and
    ``names[k:]`` each hold no name twice.

    Args:
        names: Binding names in file order.

    Returns:
        ``(lo, hi)``, the range of valid splits (inclusive), or None when no
        split is valid: the list is not one ``capture_save``'s (for example
        ``capture_save`` was called twice on one graph, repeating every name).
    """
    seen: set = set()
    prefix = 0
    for n in names:
        if n in seen:
            break
        seen.add(n)
        prefix += 1
    seen = set()
    suffix = 0
    for n in reversed(names):
        if n in seen:
            break
        seen.add(n)
        suffix += 1
    lo, hi = len(names) - suffix, prefix
    return (lo, hi) if lo <= hi else None


def binding_roles(names: list) -> dict:
    """``{name: (is_input, is_output)}`` as far as a stock binding list tells, one entry per name.

    A name written twice is both; a name written once is an input when it
    comes before every valid split, an output when after, and ``None`` (not
    known) for both when the list does not tell (a file without wrpkit's
    signature and without in-place bindings).

    Args:
        names: Binding names in file order.
    """
    split = binding_split(names)
    out: dict = {}
    for i, n in enumerate(names):
        if n in out:
            out[n] = (True, True)
        elif split is None:
            out[n] = (None, None)
        elif i < split[0]:
            out[n] = (True, False)
        elif i >= split[1]:
            out[n] = (False, True)
        else:
            out[n] = (None, None)
    return out


__all__ = ["binding_split", "binding_roles"]
