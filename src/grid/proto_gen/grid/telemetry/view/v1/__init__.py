"""Generated Protobuf code (do not edit; regenerate with `make proto`)."""
