"""The seed-000 side of the core: how load signals cross sites, and gateway feedback.

- `mode`: the signal transport's lifecycle rules (gossip or poll, read once at start);
- `connections`: the signals listener's limits (classes, caps, the Local reserve),
  the caps of its connection book;
- `feedback`: the version-1 ingest-feedback headers and the per-reporter evidence machine.
"""
