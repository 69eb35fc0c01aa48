"""Errors raised at the boundary (CLI, HTTP, config files) with a message naming the field."""


class ConfigError(ValueError):
    """Bad user input: the message names the field and the allowed values or range.

    The CLI prints the message on one line and exits with code 2.
    """
