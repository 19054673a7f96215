"""Planning and goals: the session task list, plan mode, and persistent goals."""
