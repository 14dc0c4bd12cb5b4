"""Whole replays: the two engines, the `wrp replay` library, the public `wrpkit.load` front door."""
