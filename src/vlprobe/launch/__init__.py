"""Running many commands: the known-answer testbed's task scheduler."""
