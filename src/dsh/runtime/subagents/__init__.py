"""Nested sub-agents: the ``subagent-dsh`` tool runs a task in a second dsh runtime."""
