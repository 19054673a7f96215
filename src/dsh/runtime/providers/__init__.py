"""Model providers: each row publishes service ``llm:<route>`` (see :mod:`.base`)."""
