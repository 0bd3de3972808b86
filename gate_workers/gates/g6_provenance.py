"""G6 provenance: the tool the agent called is the tool a human reviewed.

The sha256 of each tool's canonical definition (name, description, input schema) must equal the
mandate's pin; drift blocks. Upstream tools (proxy mode) must be pinned. Interlock's own tools are
checked when pinned; an unpinned own tool is allowed and the result records that it was unpinned.
"""

from __future__ import annotations

from gate_workers.context import GateContext, ResolvedAction
from interlock.verdicts import GateResult, allow, block

NAME = "G6"


def check(action: ResolvedAction, ctx: GateContext) -> GateResult:
    return check_tool(action.tool, ctx)


def check_tool(tool: str, ctx: GateContext) -> GateResult:
    current = ctx.tool_hashes.get(tool)
    pinned = ctx.mandate.pin(tool) if ctx.mandate is not None else None
    if current is None:
        return block("G6_UNKNOWN_TOOL", tool=tool)
    if pinned is None:
        if tool in ctx.upstream_tools:
            return block("G6_UNPINNED_TOOL", tool=tool, current_sha256=current)
        return allow("G6_UNPINNED", tool=tool, unpinned=True, current_sha256=current)
    if pinned != current:
        return block("G6_MANIFEST_DRIFT", tool=tool, pinned_sha256=pinned, current_sha256=current)
    tier = ctx.mandate.trust_tier(tool) if ctx.mandate is not None else None
    return allow("G6_PINNED", tool=tool, sha256=current, **({"trust_tier": tier} if tier is not None else {}))
