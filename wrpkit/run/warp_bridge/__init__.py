"""The few places that talk to Warp itself: its start, its internals (one adapter), its dtypes."""
