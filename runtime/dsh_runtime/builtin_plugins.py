"""dsh's own shipped plugins: row ``name`` → ``"module:attr"``.

The loader consults this table before the ``dsh.plugins`` entry points, so booting a
shipped profile never scans installed distributions' metadata (and a frozen carrier, which
has none, still finds its plugins). Keep it a plain literal: importing it must cost nothing.
"""

from __future__ import annotations

BUILTIN_PLUGINS: dict[str, str] = {
    "sdk-jsonrpc-server": "dsh_runtime.servers.sdk:SdkServer",
    "llm-openai-compatible": "dsh_runtime.providers.openai_compat:OpenAICompatibleProvider",
    "llm-anthropic": "dsh_runtime.providers.anthropic:AnthropicProvider",
    "agent-core": "dsh_runtime.agent.plugin:AgentCore",
    "sessions-sqlite": "dsh_runtime.sessions.plugin:SessionsSqlite",
    "sessions-postgres": "dsh_runtime.sessions.postgres.plugin:SessionsPostgres",
    "llm-scripted": "dsh_runtime.providers.scripted:ScriptedProvider",
    "tool-working-directory": "dsh_runtime.tools.working_directory:WorkingDirectoryTool",
    "tools-fs": "dsh_runtime.tools.fs:FsTools",
    "tools-search": "dsh_runtime.tools.search:SearchTools",
    "tools-shell": "dsh_runtime.tools.shell:ShellTools",
    "tools-web": "dsh_runtime.tools.web:WebTools",
    "tools-image": "dsh_runtime.tools.images:ImageTools",
    "context-instructions": "dsh_runtime.tools.instructions:InstructionsContext",
    "tools-skills": "dsh_runtime.tools.skills:SkillsTools",
    "tools-plan": "dsh_runtime.planning.plan:PlanTools",
    "tools-goals": "dsh_runtime.planning.goals:GoalTools",
    "guardrail-policy": "dsh_runtime.policy:PolicyGuardrail",
    "headless-runner": "dsh_runtime.headless.runner:HeadlessRunner",
    "web-server": "dsh_runtime.web.plugin:WebServer",
    "acp-server": "dsh_runtime.servers.acp:AcpServer",
    "subagent-dsh": "dsh_runtime.subagents.tool:SubagentPlugin",
    "mcp-servers": "dsh_runtime.mcp.plugin:McpServers",
}
