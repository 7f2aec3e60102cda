"""The local mesh supervisor behind `grid demo`, its dev PKI and mock providers."""
