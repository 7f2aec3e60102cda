"""The pure core of Grid: protocol machines, CRDTs, scoring and the overlay.

Nothing here performs I/O, reads a clock or draws OS randomness. Inputs and `now`
go in, effects come out; an import contract enforces this.
"""
