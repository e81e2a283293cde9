#!/usr/bin/env python3
"""Finds paths in the docs that name files or directories this checkout does
not have.

A path is checked when it starts with a top-level entry of the repository
(`controller/src/plan/infra.rs`, `docs/`, `README.md`) and holds no
placeholder (`<name>`, `*`, `…`, `{`, `$`); a bare source file name
(`forward.rs`, `run.py`) must be the name of some file in the repository. In Markdown the candidates are
the inline code spans outside fenced blocks; in other files (the lab's YAML)
every word of a `#` comment. A trailing `:LINE` is ignored.

Checked by default: README.md, docs/**/*.md, lab/*.yaml (the lab's manifests). Prints each stale
path as `file:line: path` and exits 1; exits 0 when every path exists.

Usage: tools/doc_paths.py [--root DIR] [FILE...]
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# Build outputs and the docs site: never in a checkout, named on purpose.
NOT_SOURCE = {"target", "site"}
PATH = re.compile(r"^[\w.+-]+(?:/[\w.+-]+)*/?$")
SOURCE_NAME = re.compile(r"^[\w.-]+\.(?:rs|py)$")
LINE_SUFFIX = re.compile(r":\d+(?::\d+)?$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass
class Stale:
    file: Path
    line: int
    path: str


def top_level(root: Path) -> set[str]:
    """The names a repository path may start with."""
    return {p.name for p in root.iterdir() if not p.name.startswith(".") and p.name not in NOT_SOURCE}


def candidates_markdown(text: str):
    """(line, span) for every inline code span outside fenced blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in CODE_SPAN.finditer(line):
            yield n, m.group(2).strip()


def candidates_comments(text: str):
    """(line, word) for every word of a `#` comment."""
    for n, line in enumerate(text.splitlines(), 1):
        hash_at = line.find("#")
        if hash_at < 0:
            continue
        for word in line[hash_at + 1 :].split():
            yield n, word.strip("`'\"()[],;.")


def repo_path(candidate: str, tops: set[str]) -> str | None:
    """`candidate` as a repository path to check, or None when it is not one."""
    candidate = LINE_SUFFIX.sub("", candidate)
    if not PATH.match(candidate):
        return None
    first = candidate.split("/", 1)[0]
    if first not in tops:
        return None
    if "/" not in candidate and not (candidate.endswith(".md") or "." in candidate):
        # A bare word equal to a top-level directory (`tests`, `docs`) is a
        # word, not a path.
        return None
    return candidate


def source_names(root: Path, tops: set[str]) -> set[str]:
    """The names of the source files in the repository."""
    names = set()
    for top in tops:
        for pattern in ("*.rs", "*.py"):
            names.update(p.name for p in (root / top).rglob(pattern) if "target" not in p.relative_to(root).parts)
            if (root / top).is_file() and (root / top).match(pattern):
                names.add(top)
    return names


def stale_paths(root: Path, files: list[Path]) -> list[Stale]:
    tops = top_level(root)
    names: set[str] | None = None
    out = []
    for file in files:
        text = file.read_text(encoding="utf-8", errors="replace")
        markdown = file.suffix == ".md"
        found = candidates_markdown(text) if markdown else candidates_comments(text)
        for line, candidate in found:
            path = repo_path(candidate, tops)
            if path is not None:
                target = root / path
                exists = target.is_dir() if path.endswith("/") else target.exists()
                if not exists:
                    out.append(Stale(file, line, path))
            elif markdown and SOURCE_NAME.match(LINE_SUFFIX.sub("", candidate)):
                if names is None:
                    names = source_names(root, tops)
                if LINE_SUFFIX.sub("", candidate) not in names:
                    out.append(Stale(file, line, candidate))
    return out


def default_files(root: Path) -> list[Path]:
    files = [root / "README.md"]
    files += sorted((root / "docs").rglob("*.md"))
    files += sorted(p for p in (root / "lab").glob("*.yaml") if p.is_file())
    return [f for f in files if f.is_file()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    files = [f.resolve() for f in args.files] or default_files(root)
    stale = stale_paths(root, files)
    for s in stale:
        try:
            shown = s.file.relative_to(root)
        except ValueError:
            shown = s.file
        print(f"{shown}:{s.line}: {s.path} does not exist")
    if stale:
        print(f"{len(stale)} stale path(s) in the docs", file=sys.stderr)
        return 1
    print(f"doc paths: every repository path in {len(files)} files exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
