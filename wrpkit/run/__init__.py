"""Warp at run time: capture (``recording``) and load and replay (``runtime``).

The only layer that drives Warp.  Imports :mod:`wrpkit.checks`,
:mod:`wrpkit.formats` and the root.
"""
