"""A capture made ready for Warp: decoded, validated and checked (prepare), then loaded into Warp (program)."""
