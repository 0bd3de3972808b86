"""Shared vocabulary of every Interlock actor: configuration, money, canonical JSON, the semantic
idempotency key, queue messages, the mandate, queue and key names, failpoints, errors — and the
`interlock` command line, the one composition root, which imports each command's module only when that
command runs. Nothing here talks to a rail or owns a process, and nothing here imports a package above it
(docs/architecture.md; checked by `make lint`)."""
