"""Child processes: a replay that crashes, hangs or is interrupted never takes its caller down."""
