"""Errors users can act on: raised for bad input, caught by the CLI and printed without a traceback."""


class SGTError(Exception):
    """Base class for expected, user-facing errors (bad data, bad configuration)."""


class DatasetError(SGTError):
    """A dataset file or source is missing, malformed or inconsistent."""


class ConfigError(SGTError):
    """A configuration value is invalid."""
