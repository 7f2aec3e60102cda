"""A sans-IO SWIM membership machine with the Lifeguard refinements."""
