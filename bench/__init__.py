"""The scenario benchmark (30 scenarios in 5 families, one scripted naive agent run direct and
gated against the same sandbox) and the performance bench (added latency, throughput, gate
decisions per second, the SQLite commit floor). Both write their sections of RESULTS.md."""
