"""Finding where a capture goes wrong, by replaying and rewriting it.

Sits on :mod:`wrpkit.run` and everything below it.
"""
