"""The scenario benchmark (direct vs gated, 30 scenarios in 5 families) and the performance bench;
both write their numbers into RESULTS.md. Not yet built: see issue 9."""
