"""Every span, metric and attribute name telemetry exports, in one place.

The ``gen_ai.*``, ``mcp.*``, ``error.*``, ``http.*``, ``server.*`` and ``network.*``
names are imported from the installed ``opentelemetry-semantic-conventions`` package
rather than typed here: OpenTelemetry's GenAI conventions are still incubating and have
renamed attributes between versions (``gen_ai.system`` became ``gen_ai.provider.name``),
so the package the ``otel`` extra pins is the one source. The ``dsh.*`` names are dsh's
own, for what the conventions do not name (the route, the cost, the sandbox rung, the
approval). Span names and kinds follow the conventions: ``invoke_agent {agent}``
(INTERNAL) for a turn, ``chat {model}`` (CLIENT) for a model request, ``execute_tool
{tool}`` (INTERNAL) for a tool call, with an MCP tool's ``mcp.*`` attributes on that same
span, as the MCP conventions ask when an agent already traces the call.
"""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import mcp_attributes as mcp
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import (
    error_attributes,
    http_attributes,
    network_attributes,
    server_attributes,
)

OPERATION = gen_ai.GEN_AI_OPERATION_NAME
PROVIDER = gen_ai.GEN_AI_PROVIDER_NAME
AGENT_NAME = gen_ai.GEN_AI_AGENT_NAME
AGENT_ID = gen_ai.GEN_AI_AGENT_ID
CONVERSATION = gen_ai.GEN_AI_CONVERSATION_ID
REQUEST_MODEL = gen_ai.GEN_AI_REQUEST_MODEL
REQUEST_MAX_TOKENS = gen_ai.GEN_AI_REQUEST_MAX_TOKENS
REQUEST_STREAM = gen_ai.GEN_AI_REQUEST_STREAM
RESPONSE_MODEL = gen_ai.GEN_AI_RESPONSE_MODEL
FINISH_REASONS = gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
TIME_TO_FIRST_CHUNK = gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
INPUT_TOKENS = gen_ai.GEN_AI_USAGE_INPUT_TOKENS
OUTPUT_TOKENS = gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
CACHE_READ_TOKENS = gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
CACHE_WRITE_TOKENS = gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
REASONING_TOKENS = gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
TOKEN_TYPE = gen_ai.GEN_AI_TOKEN_TYPE
TOOL_NAME = gen_ai.GEN_AI_TOOL_NAME
TOOL_CALL_ID = gen_ai.GEN_AI_TOOL_CALL_ID
TOOL_TYPE = gen_ai.GEN_AI_TOOL_TYPE
TOOL_ARGUMENTS = gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS
TOOL_RESULT = gen_ai.GEN_AI_TOOL_CALL_RESULT
INPUT_MESSAGES = gen_ai.GEN_AI_INPUT_MESSAGES
OUTPUT_MESSAGES = gen_ai.GEN_AI_OUTPUT_MESSAGES
MCP_METHOD = mcp.MCP_METHOD_NAME
MCP_PROTOCOL_VERSION = mcp.MCP_PROTOCOL_VERSION
ERROR_TYPE = error_attributes.ERROR_TYPE
HTTP_STATUS = http_attributes.HTTP_RESPONSE_STATUS_CODE
SERVER_ADDRESS = server_attributes.SERVER_ADDRESS
SERVER_PORT = server_attributes.SERVER_PORT
NETWORK_TRANSPORT = network_attributes.NETWORK_TRANSPORT

CHAT = "chat"
INVOKE_AGENT = "invoke_agent"
EXECUTE_TOOL = "execute_tool"
"""``gen_ai.operation.name`` values (the conventions' well-known ones)."""

AGENT = "dsh"
"""``gen_ai.agent.name`` of every turn: the agent is dsh (the profile is ``dsh.profile``)."""

# dsh's own attributes.
PROFILE = "dsh.profile"
TURN = "dsh.turn"
TURN_OUTCOME = "dsh.turn.outcome"
STEP = "dsh.step"
ROUTE = "dsh.route"
EFFORT = "dsh.reasoning.effort"
COST = "dsh.cost.usd"
ESTIMATED = "dsh.usage.estimated"
RETRIES = "dsh.retries"
TOOL_OUTCOME = "dsh.tool.outcome"
SANDBOX_RUNG = "dsh.sandbox.rung"
APPROVAL_DECISION = "dsh.approval.decision"
ERROR_SOURCE = "dsh.error.source"
APPROVAL_SPAN = "approval"
"""The approval wait's span: ``approval {tool}``, a child of the call's ``execute_tool``."""

FACTS = {
    "sandbox.rung": SANDBOX_RUNG,
    "mcp.method.name": MCP_METHOD,
    "mcp.protocol.version": MCP_PROTOCOL_VERSION,
    "network.transport": NETWORK_TRANSPORT,
    "server.address": SERVER_ADDRESS,
    "server.port": SERVER_PORT,
}
"""A tool result's facts whose names the conventions define; any other fact ``x`` is
exported as ``dsh.x`` (``mcp.server`` → ``dsh.mcp.server``)."""

# Metrics: the conventions' (created by the package's own helpers) and dsh's.
TOKEN_USAGE = gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE
OPERATION_DURATION = gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION
FIRST_CHUNK = gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK
COST_METRIC = "dsh.cost"
TURN_DURATION = "dsh.turn.duration"
TOOL_DURATION = "dsh.tool.duration"
APPROVAL_DURATION = "dsh.approval.duration"
ERRORS = "dsh.errors"

create_token_usage = gen_ai_metrics.create_gen_ai_client_token_usage
create_operation_duration = gen_ai_metrics.create_gen_ai_client_operation_duration
create_first_chunk = gen_ai_metrics.create_gen_ai_client_operation_time_to_first_chunk
