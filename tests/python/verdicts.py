"""verdicts.py: the CPU Python tests' count of checks (the GPU tests have
gpu_env.Checks): expect() prints a FAIL line for a false condition and
counts it; finish() prints `N passed, N failed` and exits 1 on a failure."""

import sys


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
