"""How Interlock talks to payment rails: the Razorpay REST client (httpx) and, later, an upstream
MCP server adapter. Clients classify failures and never retry (I3). Not yet built: see issue 3."""
