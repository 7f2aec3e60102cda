"""Code generated from proto/ by `make proto` (grpcio-tools). Do not edit by hand."""
