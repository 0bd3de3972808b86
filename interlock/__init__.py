"""Shared vocabulary of every Interlock actor: configuration, money, canonical JSON, the semantic
idempotency key, queue messages, the mandate, queue and key names, failpoints, errors and the
`interlock` command line. Nothing here talks to a rail or owns a process."""
