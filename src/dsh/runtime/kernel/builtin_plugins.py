"""dsh's own shipped plugins: row ``name`` → ``"module:attr"``.

The loader consults this table before the ``dsh.plugins`` entry points, so booting a
shipped profile never scans installed distributions' metadata (and a frozen carrier, which
has none, still finds its plugins). Keep it a plain literal: importing it must cost nothing.
"""

from __future__ import annotations

BUILTIN_PLUGINS: dict[str, str] = {
    "sdk-jsonrpc-server": "dsh.runtime.servers.sdk:SdkServer",
    "llm-openai-compatible": "dsh.runtime.providers.openai_compat:OpenAICompatibleProvider",
    "llm-anthropic": "dsh.runtime.providers.anthropic:AnthropicProvider",
    "llm-openai-responses": "dsh.runtime.providers.responses:OpenAIResponsesProvider",
    "agent-core": "dsh.runtime.agent.plugin:AgentCore",
    "sessions-sqlite": "dsh.runtime.sessions.plugin:SessionsSqlite",
    "sessions-postgres": "dsh.runtime.sessions.postgres.plugin:SessionsPostgres",
    "llm-scripted": "dsh.runtime.providers.scripted:ScriptedProvider",
    "tool-working-directory": "dsh.runtime.tools.working_directory:WorkingDirectoryTool",
    "tools-fs": "dsh.runtime.tools.fs:FsTools",
    "tools-search": "dsh.runtime.tools.search:SearchTools",
    "tools-shell": "dsh.runtime.tools.shell:ShellTools",
    "tools-web": "dsh.runtime.tools.web:WebTools",
    "tools-image": "dsh.runtime.tools.images:ImageTools",
    "context-instructions": "dsh.runtime.tools.instructions:InstructionsContext",
    "tools-skills": "dsh.runtime.tools.skills:SkillsTools",
    "tools-plan": "dsh.runtime.planning.plan:PlanTools",
    "tools-goals": "dsh.runtime.planning.goals:GoalTools",
    "guardrail-policy": "dsh.runtime.tools.policy:PolicyGuardrail",
    "headless-runner": "dsh.runtime.headless.runner:HeadlessRunner",
    "web-server": "dsh.runtime.web.plugin:WebServer",
    "acp-server": "dsh.runtime.servers.acp:AcpServer",
    "subagent-dsh": "dsh.runtime.subagents.tool:SubagentPlugin",
    "mcp-servers": "dsh.runtime.mcp.plugin:McpServers",
}
