"""The gateway side of Grid's contracts: overlay loading, signal polling, feedback."""
