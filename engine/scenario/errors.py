"""Errors the engine raises for bad user input, and how they quote that input.

Every message names the offending field (dotted path such as
``workload.classes[0].share``) or trace row, and says what is allowed, so the
CLI and the app can show it as one line without a traceback. A message quotes
input only through ``excerpt``, ``printable`` or ``key_text``: short and printable,
so an error line never carries a file's or a link's content.
"""

EXCERPT_CHARS = 40


class ScenarioError(ValueError):
    """An invalid scenario: a bad key, value, or an impossible combination; ``fix``: the overrides that resolve it
    (dotted keys, as ``apply_overrides`` takes them) when one change does, which a page offers as one click under
    ``fix_label``."""

    def __init__(self, message: str = "", fix: dict | None = None, fix_label: str = "") -> None:
        super().__init__(message)
        self.fix = dict(fix or {})
        self.fix_label = fix_label

    def __reduce__(self):  # the fix survives a worker process's pickling
        return type(self), (str(self), self.fix, self.fix_label)


class TraceError(ScenarioError):
    """A trace file that cannot be read: missing column, malformed row."""


def excerpt(value: object, chars: int = EXCERPT_CHARS) -> str:
    """A short, printable rendering of ``value`` for an error line (``repr`` escapes control characters)."""
    text = repr(value)
    return text if len(text) <= chars else text[: chars - 3] + "..."


def printable(text: str, chars: int = EXCERPT_CHARS) -> str:
    """``text`` with control characters replaced by '?' and cut to ``chars`` (a file name for a message)."""
    clean = "".join(c if c.isprintable() else "?" for c in text[: chars + 1])
    return clean if len(clean) <= chars else clean[: chars - 3] + "..."


def key_text(key: object) -> str:
    """A table key for an error line: as it is when short and printable, else an excerpt."""
    if isinstance(key, str) and key.isprintable() and len(key) <= EXCERPT_CHARS:
        return key
    return excerpt(key)
