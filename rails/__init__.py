"""How Interlock talks to payment rails: the Razorpay REST client (httpx), the upstream MCP server
adapter (proxy mode), one Rail interface over both, and the pager that searches a rail's lists for
a stamp. Adapters classify failures and never retry (I3)."""
