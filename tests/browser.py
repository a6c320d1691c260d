"""A report page as a reader's browser lays it out: Debian's headless Chromium (installed by `bash deploy/setup.sh
all`, which `make test` runs) loads a copy of the page with a probe script that measures it after load.

The probe reports the page's own width against the window's (a page wider than the window scrolls sideways), the
elements outside a scrolling box that reach past the window's right edge, and the images that did not load.
Chromium prints the DOM once the page is idle (``--dump-dom``); the probe leaves its answer in the title.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

WIDTH, HEIGHT = 1400, 900
CHROMIUM = ("chromium", "chromium-browser")

PROBE = """<script>
window.addEventListener("load", () => {
  const width = document.documentElement.clientWidth;
  const wide = [...document.body.querySelectorAll("*")]
    .filter((e) => !e.closest(".scroll") && e.getBoundingClientRect().right > width + 1)
    .map((e) => e.tagName.toLowerCase() + (e.className ? "." + e.className : ""));
  const images = [...document.images];
  const missing = images.filter((i) => !(i.complete && i.naturalWidth > 0)).map((i) => i.getAttribute("src"));
  document.title = JSON.stringify({
    window: width, page: document.documentElement.scrollWidth, wide, images: images.length, missing,
  });
});
</script>"""


@dataclasses.dataclass(frozen=True)
class Layout:
    window: int
    page: int
    """The page's scroll width: more than ``window`` when something makes it scroll sideways."""
    wide: list[str]
    """Elements, outside any scrolling box, whose right edge is past the window's."""
    images: int
    missing: list[str]
    """``src`` of each image that did not load."""


def chromium() -> str | None:
    return next((path for name in CHROMIUM if (path := shutil.which(name))), None)


def layout(page: Path, width: int = WIDTH) -> Layout:
    """``page`` (an HTML file whose images sit beside it) laid out in a ``width`` px window."""
    binary = chromium()
    if binary is None:
        raise RuntimeError("Chromium is not installed: run `bash deploy/setup.sh all` (make test does)")
    probed = page.with_name(f".probe-{page.name}")
    text = page.read_text()
    probed.write_text(text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE)
    try:
        done = subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
            + [f"--window-size={width},{HEIGHT}", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        probed.unlink(missing_ok=True)
    title = re.search(r"<title>(.*?)</title>", done.stdout, re.S)
    if done.returncode != 0 or title is None or not title.group(1).startswith("{"):
        raise RuntimeError(f"Chromium gave no measurement (exit {done.returncode}): {done.stderr[-2000:]}")
    return Layout(**json.loads(html.unescape(title.group(1))))
