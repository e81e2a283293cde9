#!/usr/bin/env python3
"""Finds import circles between the modules of every crate in the workspace.

A node is one module file (`foo.rs` or `foo/mod.rs`) of one crate target
(library, binary, test, bench, example, build script). There is an edge A -> B
when A's code names an item of B through a path that starts with `crate::`,
`super::` or `self::` (in `use` trees and in expressions; comments, doc text
and string literals are skipped). Inline modules (`mod tests { ... }`) belong
to their file. A module naming its own ancestors (a child's `super::` to its
parent `mod.rs`, any `crate::Item` of the crate root) and a module naming its
own descendants (re-exports from `mod.rs`) make no edge.

Every strongly connected component of more than one file is a circle: each is
printed with its files and the lines that make its edges, and the command
exits 1. It exits 0 when there is none.

Usage: tools/import_circles.py [--workspace DIR]  (default: this checkout)
The crate targets come from `cargo metadata --no-deps --offline`.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The tokens that matter for module paths, found by one scan. Order matters:
# comments first, raw and byte strings and char literals before identifiers
# (`r"`, `b'`), char literals before lifetimes (`'a'` vs `'a`). Runs of
# whitespace, numbers and other punctuation are one `skip` match each.
TOKEN = re.compile(
    r"""
      (?P<line_comment>//[^\n]*)
    | (?P<block_comment>/\*(?:[^*/]|\*(?!/)|/(?!\*))*(?:\*/|/\*))
    | (?P<raw_string>[bc]?r(?P<hashes>\#*)".*?"(?P=hashes))
    | (?P<string>[bc]?"(?:[^"\\]|\\.)*")
    | (?P<char>b?'(?:[^'\\\n]|\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]*\}|.))')
    | (?P<ident>(?:r\#)?[A-Za-z_]\w*)
    | (?P<path_sep>::)
    | (?P<punct>[{};#\[\]=()$,*<>!])
    | (?P<skip>(?:\s+|'[A-Za-z_]\w*(?!')|\d\w*|[^\w\s"'/{};#\[\]=()$,*<>!:]+|/(?![/*])|:(?!:))+)
    """,
    re.VERBOSE | re.DOTALL,
)

# The path keywords a circle is made of.
ROOTS = ("crate", "self", "super")


@dataclass(slots=True)
class Token:
    kind: str  # "ident", "::", "punct", "string"
    text: str
    pos: int


def tokenize(source: str) -> list[Token]:
    """The tokens of a Rust source file that matter for module paths:
    identifiers, `::`, the punctuation of paths, blocks and attributes, and
    string literals (for `#[path]`). Comments (nested block comments too),
    chars, lifetimes and numbers are dropped."""
    tokens: list[Token] = []
    append = tokens.append
    pos = 0
    while True:
        restart = None
        for m in TOKEN.finditer(source, pos):
            kind = m.lastgroup
            if kind == "ident":
                text = m.group()
                append(Token("ident", text[2:] if text.startswith("r#") else text, m.start()))
            elif kind == "path_sep":
                append(Token("::", "::", m.start()))
            elif kind == "punct":
                append(Token("punct", m.group(), m.start()))
            elif kind == "block_comment":
                if m.group().endswith("/*"):  # a nested comment: find the real end
                    restart = skip_block_comment(source, m.start())
                    break
            elif kind == "string":
                text = m.group()
                append(Token("string", text[text.index('"') + 1 : -1], m.start()))
            elif kind in ("raw_string", "hashes"):
                text = m.group()
                hashes = len(m.group("hashes"))
                append(Token("string", text[text.index('"') + 1 : len(text) - 1 - hashes], m.start()))
        if restart is None:
            return tokens
        pos = restart


def skip_block_comment(source: str, start: int) -> int:
    """The position after the (nested) block comment opening at `start`."""
    depth = 0
    pos = start
    while pos < len(source):
        if source.startswith("/*", pos):
            depth += 1
            pos += 2
        elif source.startswith("*/", pos):
            depth -= 1
            pos += 2
            if depth == 0:
                return pos
        else:
            pos += 1
    return pos


@dataclass(eq=False)
class Module:
    """A module of one crate: a file module or an inline `mod x { }`."""

    name: str
    file: Path
    parent: Module | None
    # Where `mod x;` declared inside this module looks for `x.rs`/`x/mod.rs`.
    child_dir: Path
    children: dict[str, Module] = field(default_factory=dict)

    def file_module(self) -> Module:
        """The module owning this one's file (itself unless inline)."""
        m = self
        while m.parent is not None and m.parent.file == m.file:
            m = m.parent
        return m

    def ancestors(self) -> list[Module]:
        out = []
        m = self.parent
        while m is not None:
            out.append(m)
            m = m.parent
        return out


@dataclass
class Edge:
    source: Path
    target: Path
    line: int
    text: str


class Crate:
    """One crate target: its module tree, built from the root file."""

    def __init__(self, root: Path, parsed: dict[Path, tuple[str, list[Token]]]):
        # Files read once for every crate that includes them.
        self.parsed = parsed
        self.root_file = root
        self.root = Module("crate", root, None, root.parent)
        self.tokens: dict[Path, list[Token]] = {}
        self.sources: dict[Path, str] = {}
        # file -> the module that owns it (first declaration wins).
        self.file_modules: dict[Path, Module] = {}
        # `mod x;` declarations whose file is not there: (file, name, #[path]).
        self.missing: list[tuple[Path, str, str | None]] = []
        self._load(self.root)

    def _read(self, path: Path) -> list[Token]:
        if path not in self.tokens:
            if path not in self.parsed:
                source = path.read_text(encoding="utf-8", errors="replace")
                self.parsed[path] = (source, tokenize(source))
            self.sources[path], self.tokens[path] = self.parsed[path]
        return self.tokens[path]

    def _load(self, module: Module) -> None:
        """Reads `module`'s file and declares its inline and file children."""
        if module.file in self.file_modules:
            return
        self.file_modules[module.file] = module
        tokens = self._read(module.file)
        for _, kind, decl, current, path_attr in walk_modules(tokens, module):
            if kind == "inline":
                continue
            child_file = resolve_mod_file(current, decl, path_attr, module.file)
            if child_file is None:
                self.missing.append((module.file, decl, path_attr))
                continue
            child = Module(decl, child_file, current, child_dir_of(child_file))
            current.children[decl] = child
            self._load(child)

    def edges(self) -> list[Edge]:
        out = []
        seen = set()
        for path, module in self.file_modules.items():
            tokens = self.tokens[path]
            lines = self.sources[path].splitlines()
            starts = line_starts(self.sources[path])
            for i, current in walk_paths(tokens, module):
                for target, at in resolve_use(tokens, i, current):
                    if target is None:
                        continue
                    src = current.file_module()
                    dst = target.file_module()
                    if src is dst or dst in src.ancestors() or src in dst.ancestors():
                        continue
                    line = bisect.bisect_right(starts, tokens[at].pos)
                    if (src.file, line, dst.file) not in seen:
                        seen.add((src.file, line, dst.file))
                        out.append(Edge(src.file, dst.file, line, lines[line - 1].strip()))
        return out


def line_starts(source: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", source):
        starts.append(m.end())
    return starts


def child_dir_of(file: Path) -> Path:
    """Where a file module's `mod x;` children live: beside a `mod.rs`,
    in `foo/` for `foo.rs`."""
    return file.parent if file.name == "mod.rs" else file.parent / file.stem


def resolve_mod_file(current: Module, name: str, path_attr: str | None, file: Path) -> Path | None:
    if path_attr is not None:
        # Relative to the declaring file's directory (inline nesting aside).
        candidate = (file.parent / path_attr).resolve()
        return candidate if candidate.is_file() else None
    for candidate in (current.child_dir / f"{name}.rs", current.child_dir / name / "mod.rs"):
        if candidate.is_file():
            return candidate.resolve()
    return None


def walk_modules(tokens: list[Token], module: Module):
    """Yields (index, kind, name, enclosing module, #[path] value) for each
    `mod name;` ("file") and `mod name {` ("inline") of one file, creating
    the inline modules in the tree as it goes."""
    stack: list[tuple[Module, int]] = []  # (inline module, depth its `{` opened at)
    depth = 0
    current = module
    pending_path: str | None = None
    i = 0
    n = len(tokens)
    while i < n:
        t = tokens[i]
        if t.kind == "punct" and t.text == "{":
            depth += 1
        elif t.kind == "punct" and t.text == "}":
            depth -= 1
            if stack and stack[-1][1] == depth:
                stack.pop()
                current = stack[-1][0] if stack else module
        elif t.kind == "punct" and t.text == "#":
            attr = path_attribute(tokens, i)
            if attr is not None:
                pending_path = attr
        elif t.kind == "ident" and t.text == "mod" and i + 2 < n and tokens[i + 1].kind == "ident":
            name = tokens[i + 1].text
            after = tokens[i + 2]
            if after.kind == "punct" and after.text == ";":
                yield i, "file", name, current, pending_path
                pending_path = None
            elif after.kind == "punct" and after.text == "{":
                inline = current.children.get(name)
                if inline is None:
                    inline = Module(name, module.file, current, current.child_dir / name)
                    current.children[name] = inline
                yield i, "inline", name, current, None
                pending_path = None
                stack.append((inline, depth))
                current = inline
                depth += 1
                i += 3
                continue
        elif t.kind == "punct" and t.text == ";":
            pending_path = None
        i += 1


def path_attribute(tokens: list[Token], i: int) -> str | None:
    """The value of `#[path = "..."]` starting at `tokens[i]` (`#`)."""
    window = tokens[i : i + 6]
    shape = [(t.kind, t.text) for t in window[:4]]
    if shape == [("punct", "#"), ("punct", "["), ("ident", "path"), ("punct", "=")] and len(window) >= 6:
        if window[4].kind == "string" and window[5].text == "]":
            return window[4].text
    return None


def walk_paths(tokens: list[Token], module: Module):
    """Yields (index, enclosing module) for each path of one file that
    starts with `crate::`, `self::` or `super::`."""
    stack: list[tuple[Module, int]] = []
    depth = 0
    current = module
    n = len(tokens)
    i = 0
    while i < n:
        t = tokens[i]
        if t.kind == "punct" and t.text == "{":
            depth += 1
        elif t.kind == "punct" and t.text == "}":
            depth -= 1
            if stack and stack[-1][1] == depth:
                stack.pop()
                current = stack[-1][0] if stack else module
        elif (
            t.kind == "ident"
            and t.text == "mod"
            and i + 2 < n
            and tokens[i + 1].kind == "ident"
            and tokens[i + 2].text == "{"
        ):
            stack.append((current.children[tokens[i + 1].text], depth))
            current = stack[-1][0]
            depth += 1
            i += 3
            continue
        elif t.kind == "ident" and t.text in ROOTS and i + 1 < n and tokens[i + 1].kind == "::":
            # `$crate::` (macros), the middle of a longer path, and
            # `pub(in crate::x)` visibilities name no item.
            before = [(t.kind, t.text) for t in tokens[max(0, i - 3) : i]]
            if not (
                before[-1:] in ([("::", "::")], [("punct", "$")])
                or before == [("ident", "pub"), ("punct", "("), ("ident", "in")]
            ):
                yield i, current
            # Skip the rest of this path: its later `self`/`super` are its own.
            i = skip_path(tokens, i)
            continue
        i += 1


def skip_path(tokens: list[Token], i: int) -> int:
    """The index after the path (and its `use` groups) starting at `i`."""
    n = len(tokens)
    i += 1
    while i < n:
        if tokens[i].kind == "::":
            i += 1
            if i < n and tokens[i].text == "{":
                i = skip_group(tokens, i)
                return i
            continue
        if tokens[i].kind == "ident" and tokens[i - 1].kind == "::":
            i += 1
            continue
        break
    return i


def skip_group(tokens: list[Token], i: int) -> int:
    depth = 0
    while i < len(tokens):
        if tokens[i].text == "{":
            depth += 1
        elif tokens[i].text == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def resolve_use(tokens: list[Token], i: int, current: Module):
    """Yields (target module, token index) for every leaf of the path (or
    `use` tree) starting at `tokens[i]`: the deepest module its segments
    name."""
    yield from _resolve_from(tokens, i, current)


def _step(module: Module | None, segment: str, current: Module) -> tuple[Module | None, bool]:
    """Follows one segment: (module reached, whether it was a module)."""
    if module is None:
        return None, False
    if segment == "crate":
        m = current
        while m.parent is not None:
            m = m.parent
        return m, True
    if segment == "self":
        return module, True
    if segment == "super":
        return module.parent, module.parent is not None
    child = module.children.get(segment)
    return (child, True) if child is not None else (module, False)


def _resolve_from(tokens: list[Token], i: int, current: Module, start: Module | None = None):
    n = len(tokens)
    module: Module | None = start if start is not None else current
    first = i
    while i < n and tokens[i].kind == "ident":
        module, is_module = _step(module, tokens[i].text, current)
        if module is None or not is_module:
            # An item of `module` (or a path that leaves the crate): the
            # rest of the path names parts of that item.
            break
        i += 1
        if i + 1 < n and tokens[i].kind == "::" and tokens[i + 1].text == "{":
            yield from _resolve_group(tokens, i + 1, current, module)
            return
        if i < n and tokens[i].kind == "::":
            i += 1
            continue
        break
    if module is not None:
        yield module, first


def _resolve_group(tokens: list[Token], i: int, current: Module, base: Module | None):
    """The leaves of a `{a::b, c, self, *}` group at `tokens[i]` (`{`)."""
    if base is None:
        return
    i += 1
    n = len(tokens)
    while i < n and tokens[i].text != "}":
        t = tokens[i]
        if t.kind == "ident":
            yield from _resolve_from(tokens, i, current, base)
            # Move to the next item of this group.
            depth = 0
            while i < n:
                if tokens[i].text == "{":
                    depth += 1
                elif tokens[i].text == "}":
                    if depth == 0:
                        break
                    depth -= 1
                elif tokens[i].text == "," and depth == 0:
                    i += 1
                    break
                i += 1
            continue
        if t.text == "{":  # a nested group without a prefix
            yield from _resolve_group(tokens, i, current, base)
            i = skip_group(tokens, i)
            continue
        if t.text == "*":
            yield base, i
        i += 1


def strongly_connected(nodes: list, edges: dict) -> list[list]:
    """Tarjan's algorithm, iterative: the components of the graph."""
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    out: list[list] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(component)
    return out


@dataclass
class Circle:
    files: list[Path]
    edges: list[Edge]


def circles_of_roots(roots: list[Path], missing: list | None = None) -> list[Circle]:
    """The import circles of the crates rooted at `roots`; a file shared by
    two crates is reported once. `mod x;` declarations whose file is not
    there are appended to `missing` (they hide part of the graph)."""
    found: dict[tuple, Circle] = {}
    parsed: dict[Path, tuple[str, list[Token]]] = {}
    for root in roots:
        crate = Crate(root.resolve(), parsed)
        if missing is not None:
            missing.extend(m for m in crate.missing if m not in missing)
        edges = crate.edges()
        graph: dict[Path, set[Path]] = {}
        for e in edges:
            graph.setdefault(e.source, set()).add(e.target)
        for component in strongly_connected(sorted(crate.file_modules), graph):
            if len(component) < 2:
                continue
            members = set(component)
            key = tuple(sorted(members))
            if key in found:
                continue
            inside = [e for e in edges if e.source in members and e.target in members]
            found[key] = Circle(sorted(members), inside)
    return list(found.values())


def crate_roots(workspace: Path) -> list[Path]:
    """Every target's root file in the workspace, from cargo metadata."""
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--offline", "--format-version", "1"],
        cwd=workspace,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    meta = json.loads(out)
    roots = []
    for package in meta["packages"]:
        for target in package["targets"]:
            roots.append(Path(target["src_path"]))
    return sorted(set(roots))


def report(circles: list[Circle], workspace: Path) -> str:
    def rel(p: Path) -> str:
        try:
            return str(p.relative_to(workspace))
        except ValueError:
            return str(p)

    lines = []
    for n, circle in enumerate(sorted(circles, key=lambda c: c.files), 1):
        lines.append(f"import circle {n}: {' , '.join(rel(f) for f in circle.files)}")
        for e in sorted(circle.edges, key=lambda e: (e.source, e.line, e.target)):
            lines.append(f"  {rel(e.source)}:{e.line} -> {rel(e.target)}: {e.text}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    workspace = args.workspace.resolve()
    roots = crate_roots(workspace)
    missing: list = []
    circles = circles_of_roots(roots, missing)
    for file, name, path_attr in missing:
        where = f' (#[path = "{path_attr}"])' if path_attr else ""
        print(f"{file.relative_to(workspace)}: no file for `mod {name};`{where}", file=sys.stderr)
    if missing:
        return 1
    if circles:
        print(report(circles, workspace))
        print(
            f"{len(circles)} import circle(s) between modules: move the shared item to a module "
            "both sides can name (see docs/architecture.md)",
            file=sys.stderr,
        )
        return 1
    print(f"import circles: none in {len(roots)} crate targets")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
