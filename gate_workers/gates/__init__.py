"""One module per gate (g1_scope ... g6_provenance), each a small predicate over an already-resolved
proposed action returning a verdict, a stable reason code and detail; each under 120 lines."""
