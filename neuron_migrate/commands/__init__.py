"""CLI commands: one module per command or command group, each exposing `register(app)`."""
