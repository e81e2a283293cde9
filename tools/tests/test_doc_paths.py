"""Tests of tools/doc_paths.py on a small repository tree written to a
temporary directory. Run: python3 -m unittest discover -s tools/tests"""

from __future__ import annotations

import io
import shutil
import sys
import tempfile
import textwrap
import unittest
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import doc_paths  # noqa: E402


class DocPathsTest(unittest.TestCase):
    def setUp(self):
        self.root = Path(tempfile.mkdtemp(prefix="doc-paths-")).resolve()
        self.addCleanup(shutil.rmtree, self.root)
        for name in ("controller/src/plan/infra.rs", "lab/src/bin/oooi-bench/main.rs", "tests/src/lib.rs", "README.md"):
            (self.root / name).parent.mkdir(parents=True, exist_ok=True)
            (self.root / name).write_text("")
        (self.root / "docs").mkdir()
        (self.root / "target" / "olm").mkdir(parents=True)

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    def stale(self, *files: Path) -> list[tuple[str, int, str]]:
        return [
            (str(s.file.relative_to(self.root)), s.line, s.path)
            for s in doc_paths.stale_paths(self.root, list(files))
        ]

    def test_existing_paths_pass(self):
        page = self.write(
            "docs/page.md",
            """
            The planner is `controller/src/plan/infra.rs` (`controller/src/plan/infra.rs:12`),
            in `controller/` beside `controller/src/plan/`; see `README.md` and `infra.rs`.
            The benchmark lives in `lab/src/bin/oooi-bench/`.
            """,
        )
        self.assertEqual(self.stale(page), [])

    def test_missing_files_and_directories_are_reported_with_their_line(self):
        page = self.write(
            "docs/page.md",
            """
            # Page
            The benchmark is `lab/src/bin/oooi-bench.rs`.
            Its data is under `tests/bench/` and `controller/src/plan/gone.rs:7`.
            The answers are in `answer.rs`.
            """,
        )
        self.assertEqual(
            self.stale(page),
            [
                ("docs/page.md", 2, "lab/src/bin/oooi-bench.rs"),
                ("docs/page.md", 3, "tests/bench/"),
                ("docs/page.md", 3, "controller/src/plan/gone.rs"),
                ("docs/page.md", 4, "answer.rs"),
            ],
        )

    def test_words_outputs_placeholders_and_fenced_blocks_are_not_paths(self):
        page = self.write(
            "docs/page.md",
            """
            A `tests` word, a `controller` word, `/etc/resolv.conf`, `192.0.2.0/24`,
            `target/olm/bundle/`, `target/chart/oooi-<version>.tgz`, `docs/*.md`,
            `namespaces/<ns>/events.yaml`, `controller/src/…`, `get/list/watch`,
            `routes.json`, `app.kubernetes.io/name=oooi`.
            ```sh
            cat controller/src/missing.rs `tests/missing.rs`
            ```
            """,
        )
        self.assertEqual(self.stale(page), [])

    def test_comments_of_other_files_are_checked_word_by_word(self):
        lab = self.write(
            "lab/lab.yaml",
            """
            # The lab's manifests (`tools/dev lab`, lab/src/bin/oooi-vlan-lab.rs).
            # Built by lab/src/bin/oooi-bench/main.rs.
            kind: Infra
            """,
        )
        self.assertEqual(self.stale(lab), [("lab/lab.yaml", 1, "lab/src/bin/oooi-vlan-lab.rs")])

    def test_command_fails_on_a_stale_path_and_passes_when_fixed(self):
        page = self.write("docs/page.md", "See `controller/src/plan/old.rs`.\n")
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = doc_paths.main(["--root", str(self.root)])
        self.assertEqual(code, 1)
        self.assertIn("docs/page.md:1: controller/src/plan/old.rs does not exist", out.getvalue())
        page.write_text("See `controller/src/plan/infra.rs`.\n")
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = doc_paths.main(["--root", str(self.root)])
        self.assertEqual(code, 0)
        self.assertIn("every repository path in 2 files exists", out.getvalue())


if __name__ == "__main__":
    unittest.main()
