"""Wire formats: the encrypted GRID frame and the Protobuf message codec."""
