"""Test doubles and the deterministic simulator: fake clock, fake lossy network."""
