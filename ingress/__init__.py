"""The MCP server agents connect to (stdio or streamable HTTP at /mcp). It validates each tool call,
stamps the trusted identity (agent_id, merchant_id) from configuration — never from tool arguments —
enqueues a Proposal on queue "gates" and answers with the first Outcome the rail worker records
(SPEC §2, §10). Read tools pass G1 and go straight to the rail; interlock_status reads the ledger.

Modules: `server` (list/dispatch), `money`, `reads`, `status` (one per kind of tool), `results` (the
result contract), `app` (shared state, caller identity), `stdio` / `http` (transports), `tokens`
(bearer token hashes), `cli` (`interlock ingress`, `interlock token new`). See docs/ingress.md.
"""
