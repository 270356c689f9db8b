"""Starting and watching trainers: the supervisor (any process) and the detached runner."""
