"""One module per gate (g1_scope ... g6_provenance), each a small predicate returning a verdict,
a stable reason code and detail. Not yet built: see issue 4."""
