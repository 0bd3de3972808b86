"""The run story as code, beside its config: `interlock up` and the supervisord configuration it writes,
the stack of real processes, the embedded redis-server, `interlock demo` and the MCP client that drives a
running stack (what chaos/ and bench/ start and talk to stacks with). It sits above every actor: it starts
them, and nothing below imports it."""
