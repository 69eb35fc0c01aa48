"""Errors raised at the boundary (CLI, HTTP, config files) with a message naming the field."""


class ConfigError(ValueError):
    """Bad user input: the message names the field and the allowed values or range.

    The CLI prints the message on one line and exits with code 2.
    """


def parse_assignments(pairs: "list[str] | tuple[str, ...]", what: str) -> dict:
    """``["k=v", ...]`` from the command line to a dict, each value read as YAML (numbers, bools,
    lists); a pair without ``=`` is a ConfigError naming ``what`` (the field or flag)."""
    import yaml

    out: dict = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"{what}: entry {pair!r} must be KEY=VALUE")
        key, _, raw = pair.partition("=")
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{what}: value of {key.strip()!r} is not valid ({exc})") from None
    return out
