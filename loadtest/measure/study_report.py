"""What the studies' reports share: latency text and the layout of ``results.json`` + ``summary.md`` + plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def ms_text(value: Any) -> str:
    """A latency in ms with three decimals, or '-' when there is none."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.3f}"


def save_report(data: dict[str, Any], out_dir: Path, png: Path | None, render) -> list[Path]:
    """``results.json`` (``data``, naming the plot) and ``summary.md`` (``render(data)``) beside the plot ``png``
    (None without matplotlib); the files written. The overload and soak reports share this layout."""
    data["plot"] = png.name if png else None
    (out_dir / "results.json").write_text(json.dumps(data, indent=1, default=str))
    (out_dir / "summary.md").write_text(render(data))
    return [out_dir / "results.json", out_dir / "summary.md", *([png] if png else [])]
