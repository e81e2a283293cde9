#!/usr/bin/env python3
"""Runs every `test_*` function of charts/tests/test_*.py, in file order.

A plain runner (no pytest) so the suite needs only the chart's own tools.
Prints one line per test and ends with `chart: N passed, M failed`; exits 1
when a test failed or none ran. `-k SUBSTRING` selects tests by name.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def collect():
    tests = []
    for path in sorted(HERE.glob("test_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        for name, fn in vars(module).items():
            if name.startswith("test_") and callable(fn) and getattr(fn, "__module__", None) == path.stem:
                tests.append((f"{path.stem}::{name}", fn))
    return tests


def main(argv):
    only = argv[argv.index("-k") + 1] if "-k" in argv else None
    tests = collect()
    if only:
        tests = [(n, f) for n, f in tests if only in n]
    passed = failed = 0
    start = time.monotonic()
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:  # a failed assertion or a tool error: report it, go on
            failed += 1
            print(f"FAIL {name} ({time.monotonic() - t0:.1f}s)", flush=True)
            detail = str(e) if isinstance(e, AssertionError) else "".join(traceback.format_exception(e))
            for line in detail.rstrip().splitlines():
                print(f"    {line}")
        else:
            passed += 1
            print(f"ok   {name} ({time.monotonic() - t0:.1f}s)", flush=True)
    print(f"charts/tests: {len(tests)} tests in {time.monotonic() - start:.1f}s")
    print(f"chart: {passed} passed, {failed} failed")
    return 1 if failed or not tests else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
