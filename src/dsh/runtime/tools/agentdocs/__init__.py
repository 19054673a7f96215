"""The documents a home and a project give the agent: ``AGENTS.md`` instructions and
``SKILL.md`` skills, discovered and read here for the plugins that offer them and for
``dsh doctor``.
"""
