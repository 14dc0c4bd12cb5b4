"""Capturing Warp work: the recording, where each op was issued, and the kernels' types and accesses."""
