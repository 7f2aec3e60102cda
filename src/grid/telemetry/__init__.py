"""The telemetry admission gateway service (seed 004)."""
