"""Conflict-free replicated data types: LWW registers, OR-Sets and G-Counters."""
