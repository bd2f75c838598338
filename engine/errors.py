"""Errors the engine raises for bad user input.

Every message names the offending field (dotted path such as
``workload.classes[0].share``) or trace row, and says what is allowed, so the
CLI and the app can show it as one line without a traceback.
"""


class ScenarioError(ValueError):
    """An invalid scenario: a bad key, value, or an impossible combination."""


class TraceError(ScenarioError):
    """A trace file that cannot be read: missing column, malformed row."""
