"""Pieces the benchmarks in bench/ share: child processes, the routing bench's model, runners."""
