"""JSON for others to read: strict (RFC 8259), so any JSON reader takes it.

Python writes ``NaN`` and ``Infinity`` for floats that are not finite, which is not JSON. A figure that is not
finite is not defined (a share of no service, a load with nothing to serve it), and JSON says that with ``null``:
``strict_json`` writes every such float as ``null``, and refuses anything else that is not plain data.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None, in tables and lists at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def strict_json(data: Any, indent: int | None = 2) -> str:
    """``data`` as strict JSON text: floats that are not finite written as ``null`` ("not defined")."""
    return json.dumps(_finite(data), indent=indent, allow_nan=False)
