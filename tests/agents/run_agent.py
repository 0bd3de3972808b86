"""One framework's agent against a running Interlock, with a scripted model and the harness kit — run by
tests/agents/test_frameworks.py with the agents venv's python (.venv-agents: the frameworks and the MCP SDK
they support, apart from Interlock's own), so nothing here imports Interlock's actors.

    run_agent.py CONFIG.json    ->  one JSON report on stdout's last line

For each scenario of the config it opens a business action (operation_ref and a signed task) and runs the
framework's agent inside it; the scripted model calls `create_refund` with the scenario's arguments once, then
answers with what the framework handed it as the tool result. The report says which tools the model was
offered, that tool result, and every call the harness put on the wire.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent_harness import Action, Escalation, Harness, RetryPolicy

PROMPT = "Refund the customer's payment as the ticket says."
LOCAL_MODEL_TURNS = 4  # a real model may call tools again and again: the run ends there


@dataclass
class Seen:
    """What the scripted model observed: the tools offered, and each tool result as the framework gave it."""

    tools: set[str] = field(default_factory=set)
    tool_results: list[Any] = field(default_factory=list)


Runner = Callable[[dict[str, Any], list[tuple[Action, dict[str, Any]]], Seen], Awaitable[list[str]]]


async def run_pydantic_ai(config: dict[str, Any], runs: list[tuple[Action, dict[str, Any]]], seen: Seen) -> list[str]:
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from agent_harness.pydantic_ai import process_tool_call

    def scripted(call: dict[str, Any]) -> FunctionModel:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            seen.tools.update(tool.name for tool in info.function_tools)
            returned = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
            if not returned:
                return ModelResponse(parts=[ToolCallPart("create_refund", call)])
            seen.tool_results.append(returned[-1].content)
            return ModelResponse(parts=[TextPart(f"refund answered {json.dumps(returned[-1].content, default=str)}")])

        return FunctionModel(respond)

    toolset = MCPToolset(config["mcp_url"], headers={"Authorization": f"Bearer {config['token']}"},
                         process_tool_call=process_tool_call)  # fmt: skip
    finals = []
    async with toolset:
        for action, call in runs:
            with action:
                result = await Agent(scripted(call), toolsets=[toolset]).run(PROMPT)
            finals.append(result.output)
    return finals


async def run_openai_agents(config: dict[str, Any], runs: list[tuple[Action, dict[str, Any]]],
                            seen: Seen) -> list[str]:  # fmt: skip
    from agents import Agent, Runner, set_tracing_disabled
    from agents.exceptions import MaxTurnsExceeded
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from agent_harness.openai_agents import MCPServerStdio, MCPServerStreamableHttp

    set_tracing_disabled(True)  # nothing leaves this machine

    class Scripted(Model):
        def __init__(self, call: dict[str, Any]) -> None:
            self.call = call

        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
            tools = kwargs.get("tools", args[1] if len(args) > 1 else [])
            seen.tools.update(tool.name for tool in tools)
            outputs = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
            if not outputs:
                call = ResponseFunctionToolCall(type="function_call", call_id="call_1", name="create_refund",
                                                arguments=json.dumps(self.call), id="fc_1", status="completed")
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            seen.tool_results.append(outputs[-1]["output"])
            text = ResponseOutputText(type="output_text", text=f"refund answered {outputs[-1]['output']}",
                                      annotations=[])  # fmt: skip
            message = ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                            content=[text])  # fmt: skip
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the scripted model does not stream")

    server: MCPServerStdio | MCPServerStreamableHttp
    if "stdio" in config:  # the SDK launches the ingress itself, as Claude Desktop would
        server = MCPServerStdio(params=config["stdio"], client_session_timeout_seconds=30, cache_tools_list=True,
                                name="interlock")  # fmt: skip
    else:
        server = MCPServerStreamableHttp(
            params={"url": config["mcp_url"], "headers": {"Authorization": f"Bearer {config['token']}"},
                    "timeout": 30},
            client_session_timeout_seconds=30, cache_tools_list=True, name="interlock",
        )  # fmt: skip
    finals = []
    async with server:
        for action, call in runs:
            if "model_url" in config:
                agent = _local_model_agent(config, server, seen)
            else:
                agent = Agent(name="refunds", instructions=PROMPT, model=Scripted(call), mcp_servers=[server])
            with action:
                try:
                    turns = LOCAL_MODEL_TURNS if "model_url" in config else 10  # 10: the SDK's default
                    result = await Runner.run(agent, config.get("prompt", PROMPT), max_turns=turns)
                    finals.append(str(result.final_output))
                except MaxTurnsExceeded:
                    finals.append(f"stopped after {LOCAL_MODEL_TURNS} turns")
    return finals


def _local_model_agent(config: dict[str, Any], server: Any, seen: Seen) -> Any:
    """The Agents SDK's own chat-completions model against a local OpenAI-compatible server (llama-cpp-python's,
    serving SmolLM2-135M): the model writes the tool call itself. Its first turn must call create_refund
    (tool_choice; the SDK lets it choose freely after that). What the framework sends the model — the tools it
    offers, the tool results — is read off the requests to the server."""
    import httpx
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    class Recorded(httpx.AsyncHTTPTransport):
        """Reads each request to the model server, and writes message content as the plain string llama-cpp-python's
        server requires (OpenAI's API also takes a list of text parts, and null content beside tool calls, which
        the Agents SDK sends)."""

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content or b"{}")
            seen.tools.update(tool["function"]["name"] for tool in body.get("tools", []))
            for message in body.get("messages", []):
                content = message.get("content")
                if isinstance(content, list):
                    message["content"] = "".join(part.get("text", "") for part in content)
                elif content is None:
                    message["content"] = ""
            replies = [m["content"] for m in body.get("messages", []) if m.get("role") == "tool"]
            if replies:
                seen.tool_results.append(replies[-1])
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            rewritten = httpx.Request(request.method, request.url, headers=headers, json=body)
            return await super().handle_async_request(rewritten)

    client = AsyncOpenAI(base_url=config["model_url"], api_key="local",
                         http_client=httpx.AsyncClient(transport=Recorded(), timeout=600))  # fmt: skip
    model = OpenAIChatCompletionsModel(model="local", openai_client=client)
    settings = ModelSettings(tool_choice="create_refund", temperature=0.0, max_tokens=96)
    return Agent(name="refunds", instructions=PROMPT, model=model, model_settings=settings, mcp_servers=[server])


async def run_langgraph(config: dict[str, Any], runs: list[tuple[Action, dict[str, Any]]], seen: Seen) -> list[str]:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_mcp_adapters.tools import load_mcp_tools
    from langgraph.prebuilt import create_react_agent
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    from agent_harness.mcp_session import HarnessSession

    class Scripted(BaseChatModel):
        call: dict[str, Any]

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            seen.tools.update(tool.name for tool in tools)
            return self

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:  # fmt: skip
            returned = [m for m in messages if isinstance(m, ToolMessage)]
            if not returned:
                message = AIMessage(content="", tool_calls=[{"name": "create_refund", "args": self.call,
                                                             "id": "call_1", "type": "tool_call"}])  # fmt: skip
            else:
                seen.tool_results.append({"status": returned[-1].status, "content": returned[-1].content})
                message = AIMessage(content=f"refund answered {returned[-1].text}")
            return ChatResult(generations=[ChatGeneration(message=message)])

    finals = []
    headers = {"Authorization": f"Bearer {config['token']}"}
    async with streamablehttp_client(config["mcp_url"], headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await load_mcp_tools(HarnessSession(session))
            for action, call in runs:
                agent = create_react_agent(Scripted(call=call), tools)
                with action:
                    state = await agent.ainvoke({"messages": [("user", PROMPT)]})
                finals.append(str(state["messages"][-1].content))
    return finals


RUNNERS: dict[str, Runner] = {"pydantic_ai": run_pydantic_ai, "openai_agents": run_openai_agents,
                              "langgraph": run_langgraph}  # fmt: skip


async def main(config: dict[str, Any]) -> dict[str, Any]:
    policy = RetryPolicy(**config["retry"])
    escalations: list[Escalation] = []  # what a person would be shown
    harness = Harness.from_key_file(config["key_file"], merchant_id=config["merchant_id"],
                                    agent_ids=[config["agent_id"]], signer=config["signer"], policy=policy,
                                    on_escalate=escalations.append)  # fmt: skip
    runs = [(harness.action(s["operation_ref"], subjects=s["subjects"], max_amount_minor=s.get("max_amount_minor")),
             s["arguments"]) for s in config["scenarios"]]  # fmt: skip
    seen = Seen()
    finals = await RUNNERS[config["framework"]](config, runs, seen)
    return {
        "tools": sorted(seen.tools),
        "tool_results": [r if isinstance(r, dict | list | str) else repr(r) for r in seen.tool_results],
        "finals": finals,
        "sent": [[{"tool": c.tool, "arguments": dict(c.arguments), "meta": dict(c.meta), "result": c.result}
                  for c in action.sent] for action, _ in runs],
        "escalations": [{"operation_ref": e.operation_ref, "tool": e.tool, "arguments": dict(e.arguments),
                         "caller_action": e.caller_action, "state": e.result.get("state")} for e in escalations],
    }  # fmt: skip


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        report = asyncio.run(main(json.load(handle)))
    print(json.dumps(report, default=str))
