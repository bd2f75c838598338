"""The code's shape that review would otherwise catch by eye: every Python line within 120 characters."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINE_CHARS = 120
FOLDERS = ("engine", "ui", "pages", "tests", "bench", "docs")


def test_every_line_fits_in_120_characters():
    files = [REPO / "app.py", *(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py"))]
    long = [f"{p.relative_to(REPO)}:{n}" for p in files
            for n, line in enumerate(p.read_text().splitlines(), start=1) if len(line) > MAX_LINE_CHARS]
    assert len(files) > 100 and not long, long
