"""Tests of tools/import_circles.py on small crate trees written to a
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

import import_circles  # noqa: E402


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


class CircleTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="import-circles-"))
        self.addCleanup(shutil.rmtree, self.dir)

    def circles(self, files: dict[str, str], root: str = "src/lib.rs"):
        write_tree(self.dir, files)
        return import_circles.circles_of_roots([self.dir / root])

    def files_of(self, circle) -> list[str]:
        return [str(f.relative_to(self.dir.resolve())) for f in circle.files]

    def edges_of(self, circle) -> list[tuple[str, int, str, str]]:
        base = self.dir.resolve()
        return [
            (str(e.source.relative_to(base)), e.line, str(e.target.relative_to(base)), e.text)
            for e in sorted(circle.edges, key=lambda e: (e.source, e.line))
        ]

    def test_a_tree_without_circle_has_none(self):
        circles = self.circles(
            {
                "src/lib.rs": """
                    mod plan;
                    mod wire;
                    pub use plan::Plan;
                    """,
                "src/wire.rs": """
                    pub fn name() -> &'static str { "crate::plan::Plan" }
                    """,
                "src/plan/mod.rs": """
                    mod infra;
                    mod proxy;
                    pub use infra::Plan;
                    pub use self::proxy::Proxy;
                    pub struct Shared;
                    """,
                "src/plan/infra.rs": """
                    use super::proxy::Proxy;
                    use crate::wire;
                    pub struct Plan(Proxy);
                    """,
                "src/plan/proxy.rs": """
                    use super::Shared;
                    use crate::plan::Shared as Again;
                    pub struct Proxy;
                    fn name() -> &'static str { crate::wire::name() }
                    """,
            }
        )
        self.assertEqual(circles, [])

    def test_two_modules_naming_each_other_are_a_circle(self):
        circles = self.circles(
            {
                "src/lib.rs": "mod fast;\nmod forward;\n",
                "src/fast.rs": """
                    use crate::forward::Forwarder;
                    pub fn wire_name() {}
                    """,
                "src/forward.rs": """
                    pub struct Forwarder;
                    fn key() {
                        let k = crate::fast::wire_name();
                    }
                    """,
            }
        )
        self.assertEqual(len(circles), 1)
        self.assertEqual(self.files_of(circles[0]), ["src/fast.rs", "src/forward.rs"])
        self.assertEqual(
            self.edges_of(circles[0]),
            [
                ("src/fast.rs", 1, "src/forward.rs", "use crate::forward::Forwarder;"),
                ("src/forward.rs", 3, "src/fast.rs", "let k = crate::fast::wire_name();"),
            ],
        )

    def test_three_siblings_through_use_groups_are_one_circle(self):
        circles = self.circles(
            {
                "src/main.rs": "mod plan;\nfn main() {}\n",
                "src/plan/mod.rs": "mod infra;\nmod proxy;\nmod policy;\n",
                "src/plan/infra.rs": """
                    use super::{
                        proxy::{self, Proxy},
                    };
                    pub struct InfraPlan;
                    """,
                "src/plan/proxy.rs": "use super::policy::*;\npub struct Proxy;\n",
                "src/plan/policy.rs": "use super::{infra::InfraPlan};\n",
                # Not part of it: names the circle, the circle never names it.
                "src/plan/leaf.rs": "use super::infra::InfraPlan;\n",
            },
            root="src/main.rs",
        )
        self.assertEqual(len(circles), 1)
        self.assertEqual(
            self.files_of(circles[0]),
            ["src/plan/infra.rs", "src/plan/policy.rs", "src/plan/proxy.rs"],
        )
        self.assertEqual(
            [(s, line, t) for s, line, t, _ in self.edges_of(circles[0])],
            [
                ("src/plan/infra.rs", 2, "src/plan/proxy.rs"),
                ("src/plan/policy.rs", 1, "src/plan/infra.rs"),
                ("src/plan/proxy.rs", 1, "src/plan/policy.rs"),
            ],
        )

    def test_comments_doc_text_and_strings_make_no_edge(self):
        circles = self.circles(
            {
                "src/lib.rs": "mod a;\nmod b;\n",
                "src/a.rs": """
                    use crate::b::B;
                    pub struct A;
                    """,
                "src/b.rs": r'''
                    //! Works with [`crate::a::A`].
                    // use crate::a::A;
                    /* crate::a::A /* nested: super::a::A */ still a comment: crate::a::A */
                    /// See [super::a::A].
                    pub struct B;
                    const S: &str = "use crate::a::A;";
                    const R: &str = r#"super::a::A "quoted" crate::a::A"#;
                    const C: char = '"';
                    fn f<'a>(x: &'a str) -> char { let _ = "crate::a"; '{' }
                    ''',
            }
        )
        self.assertEqual(circles, [])

    def test_inline_test_module_super_is_its_own_file(self):
        circles = self.circles(
            {
                "src/lib.rs": "mod a;\nmod b;\n",
                "src/a.rs": """
                    pub struct A;
                    #[cfg(test)]
                    mod tests {
                        use super::*;
                        use super::super::b::B;
                    }
                    """,
                "src/b.rs": """
                    pub struct B;
                    #[cfg(test)]
                    mod tests {
                        use super::*;
                        mod deeper {
                            use super::super::B;
                        }
                    }
                    """,
            }
        )
        self.assertEqual(circles, [])
        # The test module's `super::super::b` is a sibling: one edge; with
        # the way back, a circle.
        (self.dir / "src/b.rs").write_text("pub struct B;\nfn f() { crate::a::A; }\n")
        circles = import_circles.circles_of_roots([self.dir / "src/lib.rs"])
        self.assertEqual(len(circles), 1)
        self.assertEqual(
            [(s, line) for s, line, _, _ in self.edges_of(circles[0])],
            [("src/a.rs", 5), ("src/b.rs", 2)],
        )

    def test_visibility_paths_and_macro_crate_make_no_edge(self):
        circles = self.circles(
            {
                "src/lib.rs": "mod a;\nmod b;\n",
                "src/a.rs": "use crate::b::B;\npub(in crate::a) struct A;\n",
                "src/b.rs": """
                    pub struct B;
                    pub(in crate::b) fn f() {}
                    macro_rules! m { () => { $crate::a::A } }
                    """,
            }
        )
        self.assertEqual(circles, [])

    def test_for_loops_over_a_path_are_edges(self):
        circles = self.circles(
            {
                "src/lib.rs": "mod a;\nmod b;\n",
                "src/a.rs": "use crate::b::ALL;\npub fn f() {}\n",
                "src/b.rs": "pub const ALL: [u8; 1] = [1];\nfn g() { for x in crate::a::f() {} }\n",
            }
        )
        self.assertEqual(len(circles), 1)

    def test_modules_by_path_attribute_are_followed(self):
        circles = self.circles(
            {
                "benches/bench.rs": """
                    #[path = "../tests/support/mod.rs"]
                    mod support;
                    mod local;
                    fn main() {}
                    """,
                "benches/local.rs": "use crate::support::mock::Mock;\npub struct L;\n",
                "tests/support/mod.rs": "pub mod mock;\n",
                "tests/support/mock.rs": "pub struct Mock;\nfn f() { crate::local::L; }\n",
            },
            root="benches/bench.rs",
        )
        self.assertEqual(len(circles), 1)
        self.assertEqual(self.files_of(circles[0]), ["benches/local.rs", "tests/support/mock.rs"])

    def test_a_module_without_its_file_fails_the_command(self):
        write_tree(
            self.dir,
            {
                "Cargo.toml": """
                    [package]
                    name = "fixture"
                    version = "0.1.0"
                    edition = "2024"
                    """,
                "src/lib.rs": "mod a;\n",
                "src/a.rs": '#[path = "../moved/support.rs"]\nmod support;\nmod gone;\n',
            },
        )
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = import_circles.main(["--workspace", str(self.dir)])
        self.assertEqual(code, 1)
        self.assertIn('src/a.rs: no file for `mod support;` (#[path = "../moved/support.rs"])', err.getvalue())
        self.assertIn("src/a.rs: no file for `mod gone;`", err.getvalue())

    def test_command_prints_each_circle_and_fails(self):
        write_tree(
            self.dir,
            {
                "Cargo.toml": """
                    [package]
                    name = "fixture"
                    version = "0.1.0"
                    edition = "2024"
                    """,
                "src/lib.rs": "mod a;\nmod b;\n",
                "src/a.rs": "use crate::b::B;\npub struct A;\n",
                "src/b.rs": "use super::a::A;\npub struct B;\n",
            },
        )
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = import_circles.main(["--workspace", str(self.dir)])
        self.assertEqual(code, 1)
        self.assertIn("import circle 1: src/a.rs , src/b.rs", out.getvalue())
        self.assertIn("src/a.rs:1 -> src/b.rs: use crate::b::B;", out.getvalue())
        self.assertIn("src/b.rs:1 -> src/a.rs: use super::a::A;", out.getvalue())
        self.assertIn("1 import circle(s)", err.getvalue())

        (self.dir / "src/b.rs").write_text("pub struct B;\n")
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = import_circles.main(["--workspace", str(self.dir)])
        self.assertEqual(code, 0)
        self.assertIn("import circles: none in 1 crate targets", out.getvalue())


if __name__ == "__main__":
    unittest.main()
