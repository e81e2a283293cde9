"""The test runner's pure parts: finding test binaries, order, summaries."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import run_tests  # noqa: E402


def artifact(package_id, manifest, name, kinds, executable, test=True):
    return {
        "reason": "compiler-artifact",
        "package_id": package_id,
        "manifest_path": manifest,
        "target": {"name": name, "kind": kinds},
        "profile": {"test": test},
        "executable": executable,
    }


class TestJobs(unittest.TestCase):
    def test_each_test_binary_is_one_job_run_from_its_package(self):
        msgs = [
            artifact("path+file:///r/dns#oooi-dns@0.1.0", "/r/dns/Cargo.toml", "oooi_dns", ["lib"], "/t/oooi_dns-1"),
            artifact("path+file:///r/dns#oooi-dns@0.1.0", "/r/dns/Cargo.toml", "wire", ["test"], "/t/wire-2"),
            artifact("path+file:///r/dns#oooi-dns@0.1.0", "/r/dns/Cargo.toml", "oooi-dns", ["bin"], "/t/oooi_dns-3"),
            # the binary itself, not a test build: no job
            artifact("path+file:///r/dns#oooi-dns@0.1.0", "/r/dns/Cargo.toml", "oooi-dns", ["bin"], "/t/oooi-dns", test=False),
            # a library built for others: no executable, no job
            artifact("path+file:///r/serve#0.1.0", "/r/serve/Cargo.toml", "oooi_serve", ["lib"], None),
            {"reason": "build-finished", "success": True},
        ]
        jobs = run_tests.test_jobs(msgs, "cargo")
        self.assertEqual([j.name for j in jobs], ["oooi-dns::lib", "oooi-dns::wire", "oooi-dns::bin-oooi-dns"])
        wire = jobs[1]
        self.assertEqual(wire.argv, ["/t/wire-2"])
        self.assertEqual(wire.cwd, Path("/r/dns"))
        self.assertEqual(wire.env["CARGO_MANIFEST_DIR"], "/r/dns")
        self.assertEqual(wire.env["CARGO_PKG_NAME"], "oooi-dns")
        self.assertEqual(wire.env["CARGO_PKG_VERSION"], "0.1.0")

    def test_both_package_id_spellings(self):
        self.assertEqual(run_tests.package_name("oooi-dns 0.1.0 (path+file:///r/dns)", Path("/r/dns/Cargo.toml")), "oooi-dns")
        self.assertEqual(run_tests.package_version("oooi-dns 0.1.0 (path+file:///r/dns)"), "0.1.0")
        # a package whose name is its directory's: cargo leaves the name out
        self.assertEqual(run_tests.package_name("path+file:///r/serve#0.1.0", Path("/r/serve/Cargo.toml")), "serve")
        self.assertEqual(run_tests.package_version("path+file:///r/serve#0.1.0"), "0.1.0")


class TestSchedule(unittest.TestCase):
    def test_unknown_jobs_first_then_longest_first(self):
        jobs = [run_tests.Job(n, ["true"], Path(".")) for n in ["a", "b", "c", "d"]]
        order = run_tests.schedule(jobs, {"a": 5.0, "b": 240.0, "d": 30.0})
        self.assertEqual([j.name for j in order], ["c", "b", "d", "a"])


class TestWeights(unittest.TestCase):
    def test_the_lab_runs_alone(self):
        import io
        import re
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            light = [run_tests.Job(f"l{i}", ["sleep", "0.3"], Path(d)) for i in range(2)]
            heavy = run_tests.Job("oooi-lab::vlan_lab", ["sleep", "0.3"], Path(d))
            more = [run_tests.Job(f"m{i}", ["sleep", "0.1"], Path(d)) for i in range(3)]
            progress = io.StringIO()
            run_tests.run_pool([*light, heavy, *more], 3, 30.0, Path(d) / "logs", progress)
        text = progress.getvalue()
        beside = {m[0]: int(m[1]) for m in re.findall(r"start  (\S+) \(beside (\d+)\)", text)}
        # it waited for the two before it, and nothing started while it ran
        self.assertEqual(beside["oooi-lab::vlan_lab"], 0)
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if "start  oooi-lab::vlan_lab" in line)
        end = next(i for i, line in enumerate(lines) if line.strip().startswith("ok") and "vlan_lab" in line)
        self.assertFalse([line for line in lines[start + 1 : end] if "start" in line])
        self.assertEqual(beside["l1"], 1)
        self.assertLessEqual(max(beside.values()), 2)
        self.assertEqual(heavy.weight(3), 3)
        self.assertEqual(light[0].weight(3), 1)

    def test_the_lab_crates_test_binary_is_the_weighted_job(self):
        # The name cargo's messages give the VLAN lab's test (lab/tests/vlan_lab.rs
        # of package oooi-lab) is the one WEIGHTS names, so it keeps running alone.
        msgs = [
            artifact("path+file:///r/lab#oooi-lab@0.1.0", "/r/lab/Cargo.toml", "vlan_lab", ["test"], "/t/vlan_lab-1"),
            artifact("path+file:///r/tests#oooi-tests@0.1.0", "/r/tests/Cargo.toml", "data_path", ["test"], "/t/data_path-2"),
        ]
        lab, data_path = run_tests.test_jobs(msgs, "cargo")
        self.assertEqual(lab.name, "oooi-lab::vlan_lab")
        self.assertEqual(lab.weight(3), 3)
        self.assertEqual(data_path.weight(3), 1)


class TestSummary(unittest.TestCase):
    def test_sums_every_result_line(self):
        text = (
            "running 3 tests\n"
            "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n"
            "test result: FAILED. 10 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s\n"
        )
        self.assertEqual(run_tests.summarise(text), (13, 2))
        self.assertEqual(run_tests.summarise("no tests here"), (0, 0))


class TestPool(unittest.TestCase):
    def test_runs_every_job_reports_failures_and_kills_overruns(self):
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            jobs = [
                run_tests.Job("ok", ["bash", "-c", "echo 'test result: ok. 1 passed; 0 failed;'"], Path(d)),
                run_tests.Job("fails", ["bash", "-c", "exit 3"], Path(d)),
                run_tests.Job("hangs", ["bash", "-c", "sleep 30"], Path(d)),
            ]
            import io

            progress = io.StringIO()
            done = run_tests.run_pool(jobs, 2, 1.0, Path(d) / "logs", progress)
            self.assertIn("FAILED (exit 3) fails", progress.getvalue())
            codes = {job.name: rc for job, _, rc, _ in done}
            self.assertEqual(codes["ok"], 0)
            self.assertEqual(codes["fails"], 3)
            self.assertNotEqual(codes["hangs"], 0)
            texts = {job.name: text for job, _, _, text in done}
            self.assertIn("killed after", texts["hangs"])
            self.assertIn("1 passed", texts["ok"])


if __name__ == "__main__":
    unittest.main()
