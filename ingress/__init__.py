"""The MCP server agents connect to (stdio or streamable HTTP). It validates each tool call, stamps
the trusted identity (agent_id, merchant_id) from configuration, enqueues a Proposal on queue
"gates" and waits for the first Outcome the rail worker records. Not yet built: see issue 6."""
