#!/usr/bin/env python3
"""Run the workspace's test binaries side by side, longest first.

`cargo test` runs one test binary after another. Most of oooi's slow binaries
(the VLAN lab, the DHCP pair, DNS forwarding under abuse) spend their time
waiting on timers and real peers, not on the CPU, so running a few binaries at
once cuts the suite's wall time without starving any of them. This is the
part of cargo-nextest the suite needs, without building nextest on every
fresh machine.

    run_tests.py [--jobs N] [--timeout S] [--artifacts FILE] [--extra NAME=COMMAND ...]

* builds every test target once (`cargo test --workspace --no-run`; or reads
  the JSON messages of that build from --artifacts), then runs each binary the way `cargo test` would: from its package's directory, with
  the CARGO_* variables cargo sets at run time;
* runs the doc tests (`cargo test --workspace --doc`) and each `--extra`
  command as jobs of the same pool;
* starts the jobs that took longest last time first (durations are kept in
  target/test-durations.json; a fresh checkout starts from the times checked
  in as tools/test-durations.json), so the last job to finish is a short one;
* keeps each job's output in target/test-logs/<job>.log and prints it whole
  when the job fails; a job running past --timeout is killed and fails;
* runs every job even after a failure, then prints a table of jobs, their
  times and results, and exits 1 if any job failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# Slots a job takes in the pool (1 when not named; at most all of them).
# The VLAN lab asserts that no lookup or connection fails while addresses
# move; a connection that CPU contention stretches across a move fails (seen
# beside the chart checks), so it runs alone. Being the longest job it
# starts first, and the others share the slots after it.
WEIGHTS = {"oooi-lab::vlan_lab": 1_000}


@dataclass
class Job:
    """One command of the pool."""

    name: str
    argv: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)

    def weight(self, slots: int) -> int:
        return min(WEIGHTS.get(self.name, 1), slots)


def test_jobs(messages: list[dict], cargo: str) -> list[Job]:
    """The test binaries among cargo's JSON messages, one job each.

    Job names are `<package>::<target>` (`<package>::lib` for unit tests of
    the library, `<package>::bin-<name>` for a binary's), unique and stable
    across runs, so recorded durations find their job again.
    """
    jobs: dict[str, Job] = {}
    for m in messages:
        if m.get("reason") != "compiler-artifact":
            continue
        if not m.get("profile", {}).get("test") or not m.get("executable"):
            continue
        target = m["target"]
        kinds = target.get("kind", [])
        manifest = Path(m["manifest_path"])
        package = package_name(m["package_id"], manifest)
        if "lib" in kinds or "rlib" in kinds or "proc-macro" in kinds or "cdylib" in kinds:
            label = "lib"
        elif "bin" in kinds:
            label = f"bin-{target['name']}"
        else:
            label = target["name"]
        name = f"{package}::{label}"
        version = package_version(m["package_id"])
        env = {
            "CARGO": cargo,
            "CARGO_MANIFEST_DIR": str(manifest.parent),
            "CARGO_PKG_NAME": package,
            "CARGO_PKG_VERSION": version,
            "CARGO_CRATE_NAME": target["name"].replace("-", "_"),
        }
        jobs[name] = Job(name, [m["executable"]], manifest.parent, env)
    return list(jobs.values())


def package_name(package_id: str, manifest: Path) -> str:
    """The package's name from a cargo package id (either spelling)."""
    # "path+file:///work/x/dns#oooi-dns@0.1.0" (new) or "oooi-dns 0.1.0 (path+file://...)" (old)
    if "#" in package_id:
        tail = package_id.rsplit("#", 1)[1]
        if "@" in tail:
            return tail.split("@", 1)[0]
        # "path+file:///work/x/dns#0.1.0": the name is the directory's
        return manifest.parent.name
    return package_id.split(" ", 1)[0]


def package_version(package_id: str) -> str:
    """The package's version from a cargo package id."""
    if "#" in package_id:
        tail = package_id.rsplit("#", 1)[1]
        return tail.rsplit("@", 1)[-1]
    parts = package_id.split(" ")
    return parts[1] if len(parts) > 1 else ""


def schedule(jobs: list[Job], durations: dict[str, float]) -> list[Job]:
    """Longest first: jobs with a recorded duration by it, new jobs first of
    all (their time is unknown, and a slow one started last would decide
    the wall time), ties by name."""
    return sorted(jobs, key=lambda j: (-(durations.get(j.name, float("inf"))), j.name))


def load_durations(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}


def summarise(log_text: str) -> tuple[int, int]:
    """Passed and failed tests from libtest's "test result:" lines."""
    passed = failed = 0
    for line in log_text.splitlines():
        if line.startswith("test result:"):
            words = line.replace(";", "").split()
            for i, w in enumerate(words):
                if w == "passed" and i > 0 and words[i - 1].isdigit():
                    passed += int(words[i - 1])
                if w == "failed" and i > 0 and words[i - 1].isdigit():
                    failed += int(words[i - 1])
    return passed, failed


@dataclass
class Running:
    job: Job
    proc: subprocess.Popen
    log: Path
    started: float


def run_pool(
    jobs: list[Job], slots: int, timeout: float, logs: Path, report=None
) -> list[tuple[Job, float, int, str]]:
    """Run the jobs, at most `slots` at once, in the given order. Returns
    (job, seconds, exit code, log text) per job, in the order they ended.
    Progress and the output of failed jobs go to `report` (stderr)."""
    report = report or sys.stderr
    logs.mkdir(parents=True, exist_ok=True)
    pending = list(jobs)
    running: list[Running] = []
    done: list[tuple[Job, float, int, str]] = []
    try:
        while pending or running:
            # In order: a job that does not fit yet waits for slots, and the
            # jobs after it wait too, so a heavy job is never passed over.
            while pending and sum(r.job.weight(slots) for r in running) + pending[0].weight(slots) <= slots:
                job = pending.pop(0)
                log = logs / (job.name.replace("::", "__").replace("/", "_") + ".log")
                out = log.open("wb")
                env = dict(os.environ)
                env.update(job.env)
                proc = subprocess.Popen(
                    job.argv,
                    cwd=job.cwd,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
                out.close()
                running.append(Running(job, proc, log, time.monotonic()))
                print(f"    start  {job.name} (beside {len(running) - 1})", file=report, flush=True)
            time.sleep(0.2)
            for r in list(running):
                rc = r.proc.poll()
                elapsed = time.monotonic() - r.started
                if rc is None and elapsed > timeout:
                    kill_group(r.proc)
                    rc = r.proc.wait()
                    with r.log.open("a") as f:
                        f.write(f"\n*** killed after {timeout:.0f} s (--timeout)\n")
                    rc = rc or 124
                if rc is None:
                    continue
                running.remove(r)
                text = r.log.read_text(errors="replace")
                done.append((r.job, elapsed, rc, text))
                passed, failed = summarise(text)
                verdict = "ok" if rc == 0 else f"FAILED (exit {rc})"
                print(
                    f"    {verdict:<6} {r.job.name}  {elapsed:6.1f} s  {passed} passed, {failed} failed",
                    file=report,
                    flush=True,
                )
                if rc != 0:
                    print(f"---- output of {r.job.name} ({r.log}) ----", file=report)
                    report.write(text)
                    print(f"---- end of {r.job.name} ----", file=report, flush=True)
    finally:
        # Interrupted: take every running job down with us, their children too.
        for r in running:
            kill_group(r.proc)
    return done


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("OOOI_TEST_JOBS", "3")),
                    help="binaries run at once (default 3, or $OOOI_TEST_JOBS)")
    ap.add_argument("--timeout", type=float, default=1200.0,
                    help="seconds one job may run before it is killed and fails (default 1200)")
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=COMMAND",
                    help="another job for the pool: a shell command run from the repository root")
    ap.add_argument("--artifacts", type=Path, metavar="FILE",
                    help="the JSON messages of `cargo test --workspace --no-run "
                    "--message-format=json-render-diagnostics` already run (skips the build)")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")

    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    cargo = os.environ.get("CARGO", "cargo")
    if args.artifacts:
        try:
            text = args.artifacts.read_text()
        except OSError as e:
            ap.error(f"--artifacts: {e}")
    else:
        build = subprocess.run(
            [cargo, "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        if build.returncode != 0:
            print("the test build failed (above)", file=sys.stderr)
            return build.returncode
        text = build.stdout
    messages = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    if not any(m.get("reason") == "compiler-artifact" for m in messages):
        print("no compiler artifacts in the test build's messages", file=sys.stderr)
        return 1
    jobs = test_jobs(messages, cargo)
    jobs.append(Job("doc tests", [cargo, "test", "--workspace", "--doc", "--quiet"], ROOT))
    for extra in args.extra:
        name, sep, command = extra.partition("=")
        if not sep or not name or not command:
            ap.error(f"--extra {extra!r}: expected NAME=COMMAND")
        jobs.append(Job(name, ["bash", "-c", command], ROOT))

    # This machine's last times, over the times checked in with the
    # repository (a fresh checkout, as in CI, has only those).
    durations_file = target / "test-durations.json"
    durations = load_durations(ROOT / "tools" / "test-durations.json")
    durations.update(load_durations(durations_file))
    ordered = schedule(jobs, durations)
    print(f"==> {len(ordered)} jobs, {args.jobs} slots, longest first", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = run_pool(ordered, args.jobs, args.timeout, target / "test-logs")
    wall = time.monotonic() - started

    durations.update({job.name: round(secs, 1) for job, secs, _, _ in done})
    try:
        durations_file.write_text(json.dumps(durations, indent=1, sort_keys=True) + "\n")
    except OSError as e:
        print(f"warning: durations not kept: {e}", file=sys.stderr)

    failed_jobs = [job.name for job, _, rc, _ in done if rc != 0]
    total_passed = total_failed = 0
    print("\n==> test jobs (longest first)", file=sys.stderr)
    for job, secs, rc, text in sorted(done, key=lambda d: -d[1]):
        passed, failed = summarise(text)
        total_passed += passed
        total_failed += failed
        verdict = "ok" if rc == 0 else "FAILED"
        print(f"  {secs:7.1f} s  {verdict:<6}  {job.name}  ({passed} passed, {failed} failed)", file=sys.stderr)
    busy = sum(secs for _, secs, _, _ in done)
    print(
        f"==> {total_passed} tests passed, {total_failed} failed, in {len(done)} jobs; "
        f"{wall:.0f} s wall for {busy:.0f} s of jobs",
        file=sys.stderr,
    )
    if failed_jobs:
        print(f"==> failed jobs: {', '.join(failed_jobs)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
