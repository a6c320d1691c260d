"""README.md and docs/: every relative link resolves (the file, and for ``page.md#anchor`` a heading with that
GitHub anchor), every ``make TARGET`` they name is a target of the Makefile, every page of docs/ is linked from
the README, and the README stays short enough to read in five minutes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
MAKE = re.compile(r"(?:^|[\s(;&|])make(?:\s+-\w+)*\s+([a-z][a-z0-9-]*)")
MAKE_TARGET = re.compile(r"^([a-z][a-z0-9-]*)\s*:(?!=)", re.M)
PROJECT_PATH = re.compile(
    r"(?<![\w./-])((?:tests|export|loadtest|deploy|backends)/[\w./-]*\w\.(?:py|toml|md|yml|yaml|json))"
)


def split_code(text: str) -> tuple[list[str], list[str]]:
    """The lines outside fenced code blocks (inline code spans blanked out) and the code: each fenced block's
    lines and each inline code span."""
    prose, code = [], []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if fenced:
            code.append(line)
            continue
        code.extend(match.group(2) for match in INLINE_CODE.finditer(line))
        prose.append(INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line))
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (code spans and link markup reduced to their text), lower
    case, punctuation dropped (letters, digits, ``_``, ``-`` and spaces kept), spaces turned into ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; a repeated heading gets ``-1``, ``-2``... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    prose, _ = split_code(path.read_text())
    return [match.group(1) for line in prose for match in LINK.finditer(line)]


def is_relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) and not target.startswith("//")


def link_problems(path: Path) -> list[str]:
    """What is wrong with the relative links of one Markdown file (empty: nothing)."""
    problems = []
    for target in links(path):
        if not is_relative(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            problems.append(f"{path.name}: link {target!r}: {file_part} does not exist")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{path.name}: link {target!r}: no heading with the anchor #{anchor} in {resolved.name}")
    return problems


def make_targets(makefile: Path) -> set[str]:
    return set(MAKE_TARGET.findall(makefile.read_text()))


def named_make_targets(path: Path) -> set[str]:
    """Every ``make TARGET`` in a Markdown file's code (fenced blocks and inline code spans)."""
    _, code = split_code(path.read_text())
    return {match.group(1) for line in code for match in MAKE.finditer(line)}


def make_problems(path: Path, makefile: Path) -> list[str]:
    missing = sorted(named_make_targets(path) - make_targets(makefile))
    return [f"{path.name}: `make {target}` is not a target of {makefile.name}" for target in missing]


def missing_paths(path: Path, root: Path = ROOT) -> list[str]:
    """Project files (``tests/unit/test_x.py``, ``export/models.toml``, ...) a page names that do not exist."""
    named = sorted(set(PROJECT_PATH.findall(path.read_text())))
    return [f"{path.name}: {name} does not exist" for name in named if "*" not in name and not (root / name).exists()]


# --- the project's docs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert link_problems(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_make_target_named_exists(page):
    assert make_problems(page, ROOT / "Makefile") == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_project_file_named_exists(page):
    assert missing_paths(page) == []


def test_the_checker_finds_a_file_that_was_renamed(tmp_path):
    page = write(tmp_path / "page.md", "see `tests/unit/test_gone.py` and tests/unit/test_here.py\n")
    write(tmp_path / "tests" / "unit" / "test_here.py", "")
    assert missing_paths(page, tmp_path) == ["page.md: tests/unit/test_gone.py does not exist"]


def test_the_readme_names_the_two_commands():
    assert {"demo", "test"} <= named_make_targets(README)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in links(README) if is_relative(target)}
    unlinked = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert unlinked == [], f"docs pages without a link from README.md: {unlinked}"


def test_the_readme_is_at_most_200_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, more than {README_MAX_LINES}"


# --- the checker itself -------------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_slug_follows_github():
    assert slug("Overload: queue policy at 1x, 1.5x and 2x") == "overload-queue-policy-at-1x-15x-and-2x"
    assert slug("`text_generator`'s `CHAT` (`tests/functional/test_chat.py`)") == (
        "text_generators-chat-testsfunctionaltest_chatpy"
    )
    assert slug("The side-by-side benchmark (`make bench`)") == "the-side-by-side-benchmark-make-bench"


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    write(tmp_path / "docs" / "other.md", "# Other\n\n## A section: with punctuation\n\n## Twice\n\n## Twice\n")
    page = write(
        tmp_path / "docs" / "page.md",
        "\n".join(
            [
                "# Page",
                "[good](other.md) [good anchor](other.md#a-section-with-punctuation) [second](other.md#twice-1)",
                "[self](#page) [web](https://example.com/missing.md) [mail](mailto:a@example.com)",
                "[bad file](missing.md) and [bad anchor](other.md#no-such-heading) and [bad self](#nowhere)",
                "`[in code](not-checked.md)`",
                "```",
                "[in a fenced block](not-checked-either.md)",
                "# not a heading",
                "```",
            ]
        ),
    )
    problems = link_problems(page)
    assert len(problems) == 3, problems
    assert "missing.md does not exist" in problems[0]
    assert "#no-such-heading" in problems[1] and "#nowhere" in problems[2]
    assert "not-a-heading" not in anchors(page)


def test_the_checker_finds_a_make_target_that_does_not_exist(tmp_path):
    makefile = write(tmp_path / "Makefile", "demo: setup ## the demo\n\t@true\nsoak: MODEL ?= digits\nX := 1\n")
    page = write(
        tmp_path / "README.md",
        "`make demo`, `make soak MODEL=x`, `make -s nosuch` and, in prose, make sense\n"
        "```bash\nmake lint   # not a target\n```\n",
    )
    assert make_targets(makefile) == {"demo", "soak"}
    assert make_problems(page, makefile) == [
        "README.md: `make lint` is not a target of Makefile",
        "README.md: `make nosuch` is not a target of Makefile",
    ]
