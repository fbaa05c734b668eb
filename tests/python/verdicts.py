"""verdicts.py: the CPU Python tests' count of checks (the GPU tests have
gpu_env.Checks): expect() prints a FAIL line for a false condition and
counts it; finish() prints `N passed, N failed` and exits 1 on a failure.
run_suite() runs a unittest suite and prints `N passed, N failed, N
skipped`, its exit status returned."""

import sys
import unittest


def run_suite(suite):
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    skipped = len(result.skipped)
    failed = len(result.failures) + len(result.errors)
    passed = result.testsRun - failed - skipped
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


class Verdicts:
    def __init__(self):
        self.passed = self.failed = 0

    def expect(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what)
        return cond

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)
