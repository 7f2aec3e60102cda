"""Pure telemetry admission: roster replay, token buckets, capacity and stamping."""
