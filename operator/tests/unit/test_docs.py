"""What the docs assert that a change elsewhere could make false: every file path and heading
they name or link exists, every `skyhook_<part>.<module>` and metric name they quote is in the
code, the chart's values table states values.yaml's defaults and leaves none out, and no line
count is quoted that its file does not have. (The operator's settings table is checked against
settings.py by tests/wiring/test_settings.py, `test_the_readme_documents_every_setting`.)"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
# The docs a newcomer reads, and the benchmarks' (the figures with the commit measured).
ROOT_DOCS = ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "PACKAGE_LIFECYCLE.md")
READMES = (
    "operator",
    "planner",
    "agent",
    "cli",
    "sandbox",
    "chart",
    "packages",
    "benchmarks",
    "schemas",
    "dev",
)
DOCS = sorted(
    [
        *(ROOT / name for name in ROOT_DOCS),
        *(ROOT / part / "README.md" for part in READMES),
        *(ROOT / "docs").glob("*.md"),
    ]
)
# Directories at the top of the repository: a code path starting with one is a repo path.
TOP = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
FILE_ENDINGS = ("py", "md", "yaml", "yml", "json", "toml", "ini", "lua", "sh", "cfg", "txt")
# Paths the docs name that are not in the repository, each for its reason.
NOT_IN_THE_REPOSITORY = {
    "skyhook.yaml": "a krew manifest ci/build-cli writes",
    "nodewright.yaml": "a krew manifest ci/build-cli writes",
    "R/history/<pkg>.json": "on a node's host, R its root (agent/README.md's host layout)",
    "../x.sh": "an example of a step path outside the package, which validation refuses",
    "scripts/validate.py": "in the skyhook-packages repository",
}


@cache
def repository_paths() -> tuple[str, ...]:
    """Every file and directory of the checkout, relative to its root (directories with a
    trailing slash), leaving out what tools make (.tox, caches)."""
    found: list[str] = []
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = [
            d
            for d in subdirectories
            if d in (".github", ".ci") or not (d.startswith(".") or d == "__pycache__")
        ]
        relative = Path(directory).relative_to(ROOT).as_posix()
        prefix = "" if relative == "." else relative + "/"
        found += [prefix + d + "/" for d in subdirectories]
        found += [prefix + f for f in files]
    return tuple(found)


def links(text: str) -> Iterator[str]:
    """Relative targets of the document's Markdown links, `#anchor` included."""
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+:", target):
            yield target


def anchors(doc: Path) -> set[str]:
    """The anchors GitHub makes of a Markdown file's headings."""
    return {
        re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in doc.read_text().splitlines()
        if line.startswith("#")
    }


def code_paths(text: str) -> Iterator[str]:
    """`code` spans that name a file or directory of the repository: a path from a top
    directory (`ci/build-image`), or one ending in a file name (`passes/plan.py`, `runtime.py`,
    `planner/.../model/lanes.py`). `<...>` placeholders stand for any one name."""
    for span in re.findall(r"`([^`\s]+)`", text):
        path = span.rstrip(".,:;")
        if path.startswith(("/", "~", "$", "-", "<")) or re.search(r"[=@|:{}$*]", path):
            continue  # outside the repository: absolute, home, a variable's, a placeholder's
        if re.fullmatch(r"[\w-]+/v[\dX][\w.+-]*", path):
            continue  # a release tag, `operator/vX.Y.Z`
        first = path.split("/", 1)[0]
        if ("/" in path and first in TOP) or re.search(
            rf"(^|/)[\w.<>-]+\.({'|'.join(FILE_ENDINGS)})/?$", path
        ):
            yield path


def exists(path: str, doc: Path) -> bool:
    """Whether `path`, relative to the repository's root or the document's folder, or as the
    tail of a repository path (a module named within its package), names something here."""
    pattern = re.sub(r"<[^>]*>", "*", path).replace("...", "*")
    directory = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    if "*" not in pattern and any((base / pattern).exists() for base in (ROOT, doc.parent)):
        return True
    folder = doc.parent.relative_to(ROOT).as_posix()
    wanted = [pattern, f"{folder}/{pattern}", f"*/{pattern}"]
    # fnmatch's `*` crosses "/": `planner/.../model/lanes.py` is found under src/skyhook_planner.
    return any(
        fnmatch.fnmatchcase(candidate.rstrip("/"), w)
        for candidate in repository_paths()
        if candidate.endswith("/") or not directory
        for w in wanted
    )


def doc_id(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    text = doc.read_text()
    named = [link.split("#", 1)[0] for link in links(text)] + list(code_paths(text))
    missing = sorted(
        {p for p in named if p and p not in NOT_IN_THE_REPOSITORY and not exists(p, doc)}
    )
    assert not missing, f"{doc_id(doc)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_link_to_a_heading_finds_it(doc: Path) -> None:
    broken = []
    for link in links(doc.read_text()):
        target, _, anchor = link.partition("#")
        page = (doc.parent / target).resolve() if target else doc
        if anchor and page.suffix == ".md" and page.exists() and anchor not in anchors(page):
            broken.append(link)
    assert not broken, f"{doc_id(doc)} links to headings that do not exist: {broken}"


# --- Python names and metrics ---------------------------------------------------------------

COMPONENTS = ("schemas", "planner", "operator", "agent", "cli", "sandbox", "dev")


@cache
def sources() -> str:
    """Every component's source, and the chart's templates, as one text."""
    files = [p for c in COMPONENTS for p in (ROOT / c / "src").rglob("*.py")]
    files += [p for p in (ROOT / "chart").rglob("*") if p.suffix in (".yaml", ".tpl")]
    return "\n".join(p.read_text() for p in sorted(files))


def python_name_found(name: str) -> bool:
    """Whether `skyhook_planner.model.carryover.frozen_edit` names a module of ours and, after
    the longest such module, names it defines (a name it does not mention is gone)."""
    package, *rest = name.split(".")
    path = ROOT / package.removeprefix("skyhook_") / "src" / package
    while rest and (path / rest[0]).is_dir():
        path = path / rest.pop(0)
    if rest and path.joinpath(rest[0] + ".py").is_file():
        path = path / (rest.pop(0) + ".py")
    module = path if path.suffix == ".py" else path / "__init__.py"
    if not module.is_file():
        return False
    text = module.read_text()
    return all(re.search(rf"\b{re.escape(attribute)}\b", text) for attribute in rest)


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_python_name_and_metric_a_doc_names_exists(doc: Path) -> None:
    """`skyhook_<part>.<module>[.<name>]` spans name a module of ours (and a name in it); a
    metric name (`skyhook_held_nodes{reason="Soaking"}`, `nodewright_*`, `skyhook_operator_*`)
    is one the code publishes (a counter's `_total` suffix is prometheus_client's)."""
    missing = []
    for span in re.findall(r"`([^`\s]+)`", doc.read_text()):
        dotted = re.fullmatch(rf"skyhook_({'|'.join(COMPONENTS)})(\.\w+)+", span)
        if dotted and not python_name_found(span):
            missing.append(span)
        metric = re.fullmatch(r"((?:skyhook|nodewright)_[a-z_]*[a-z])(\{.*\})?", span)
        if metric and metric.group(1).removesuffix("_total") not in sources():
            missing.append(span)
    assert not missing, f"{doc_id(doc)} names what the code does not have: {missing}"


# --- line counts --------------------------------------------------------------------------

LINE_COUNT = re.compile(r"(about |some |over |under )?(\d[\d,]*) lines\b")


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_a_quoted_line_count_is_its_files(doc: Path) -> None:
    """A line count goes stale with the next change to its file: a doc quotes one only with the
    file it counts named just before it (in the same sentence), and only while it holds
    (exactly; within a tenth when it says "about"; "over" and "under" as they say)."""
    text = doc.read_text()
    wrong = []
    for match in LINE_COUNT.finditer(text):
        sentence = re.split(r"[.;!?]\s", text[max(0, match.start() - 300) : match.start()])[-1]
        files = [p for p in code_paths(sentence) if "." in p.rsplit("/", 1)[-1]]
        quoted = int(match.group(2).replace(",", ""))
        if not files:
            wrong.append(f"{match.group(0)!r} names no file")
            continue
        found = [
            c
            for c in repository_paths()
            if c == files[-1] or c.endswith("/" + files[-1].split(".../")[-1])
        ]
        if len(found) != 1:
            wrong.append(f"{match.group(0)!r}: {files[-1]} is {len(found)} files, not one")
            continue
        actual = len((ROOT / found[0]).read_text().splitlines())
        holds = {
            "about ": abs(actual - quoted) <= quoted / 10,
            "some ": abs(actual - quoted) <= quoted / 10,
            "over ": actual > quoted,
            "under ": actual < quoted,
        }.get(match.group(1) or "", actual == quoted)
        if not holds:
            wrong.append(f"{found[0]} has {actual} lines, not {match.group(0)!r}")
    assert not wrong, f"{doc_id(doc)}: {wrong}"


# --- the chart's values table -------------------------------------------------------------

CHART = ROOT / "chart"


def chart_rows() -> Iterator[tuple[str, str]]:
    """(value path, its Default cell's part) for each value chart/README.md's values table
    names. A row naming several values states one default for all or one each; a row whose
    default comes in parts (`on, maxUnavailable: 1`) is described, not stated."""
    text = (CHART / "README.md").read_text()
    table = text.split("| Value | Default | What it sets |", 1)[1].split("\n\n", 1)[0]
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names: list[str] = []
        for group in cells[0].split(","):
            first, *siblings = [part.strip("` ") for part in group.split(" / ")]
            names.append(first)
            # `operator.image.repository` / `tag`: siblings of the first
            names += [first.rsplit(".", 1)[0] + "." + sibling for sibling in siblings]
        defaults = outside_code(cells[1])
        if len(defaults) != len(names):
            defaults = defaults * len(names) if len(defaults) == 1 else [""] * len(names)
        yield from zip(names, defaults, strict=True)


def outside_code(cell: str) -> list[str]:
    """The cell's parts separated by commas or semicolons outside `code`."""
    parts, current, in_code = [], "", False
    for char in cell:
        if char == "`":
            in_code = not in_code
        if char in ",;" and not in_code:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()]


def stated(default: str) -> tuple[bool, Any]:
    """The value a Default cell states, or (False, None) for words the table explains."""
    default = re.sub(r"\s*\(.*\)$", "", default)  # `10m` (at least `1m`)
    code = re.match(r"^`([^`]*)`(?::.*)?$", default)
    if code:
        if "<" in code.group(1):
            return False, None  # computed: `v<appVersion>`
        return True, yaml.safe_load(code.group(1)) if code.group(1) else ""
    if re.fullmatch(r"\d+", default):
        return True, int(default)
    return False, None


def matches(default: str, actual: Any) -> bool:
    """Whether values.yaml's value is what the Default cell states; true for a cell that
    describes rather than states ("small requests", "the operator's defaults")."""
    enabled = actual.get("enabled") if isinstance(actual, dict) else actual
    if default in ("on", "off"):
        return bool(enabled) == (default == "on")
    if default == "none":
        return not actual
    known, expected = stated(default)
    return not known or actual == expected


def value_at(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(path)
        node = node[key]
    return node


def test_the_chart_values_table_states_values_yaml_defaults() -> None:
    """Each value the table names is in values.yaml with the default the table states (when
    it states one rather than describing it), and each of values.yaml's values is in the table
    (itself, or a map or `group.*` holding it)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    wrong: list[str] = []
    named: set[str] = set()
    for name, default in chart_rows():
        path = name.removesuffix(".*")
        named.add(path)
        try:
            actual = value_at(values, path)
        except KeyError:
            wrong.append(f"{name}: not in values.yaml")
            continue
        if path == name and not matches(default, actual):
            wrong.append(f"{name}: the table says {default}, values.yaml {actual!r}")
    wrong += [
        f"{knob}: in values.yaml, not in the table"
        for knob in knobs(values)
        if not any(knob == name or knob.startswith(name + ".") for name in named)
    ]
    assert not wrong, wrong


def knobs(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """values.yaml's leaves, as dotted paths (an empty map is a leaf)."""
    for key, value in values.items():
        if isinstance(value, dict) and value:
            yield from knobs(value, f"{prefix}{key}.")
        else:
            yield prefix + key
