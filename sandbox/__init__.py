"""A Razorpay-compatible rail served over HTTP (`interlock sandbox` / `python -m sandbox`).

It keeps a durable SQLite journal of every entity it creates — the ground truth that chaos and
bench verdicts count — and has seeded fault profiles that break it on purpose (ambiguous 504s,
slow applies, replayed responses, partitions, replica lag, deep pages). `sandbox.testing` starts
it as a real subprocess for tests. See docs/sandbox.md.
"""
