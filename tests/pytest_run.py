"""Runs one Python test file under pytest as one meson test: `python3 tests/pytest_run.py FILE`.

Exit status in meson's terms: 0 when every case that ran passed (skipped cases are listed with
their reasons), 77 (skipped) when no case ran because every one skipped or pytest is not
installed, 1 on any failed or erroring case or when the file holds no case at all.
Prints one line "pytest: N passed, N failed, N skipped" and, when TRAINSCOPE_PYTEST_COUNTS
names a file, appends the same line to it: tools/test.sh adds those cases to its totals.
Neither a cache directory nor .pyc files are written into the tree.
"""
import os
import sys

SKIP = 77


class Counter:
    """A pytest plugin counting cases by outcome; a setup or teardown error fails its case."""

    def __init__(self):
        self.outcomes = {}  # nodeid -> "passed" | "failed" | "skipped"

    def pytest_runtest_logreport(self, report):
        prev = self.outcomes.get(report.nodeid)
        if report.failed:
            self.outcomes[report.nodeid] = "failed"
        elif report.skipped and prev != "failed":
            self.outcomes[report.nodeid] = "skipped"
        elif report.when == "call" and report.passed and prev is None:
            self.outcomes[report.nodeid] = "passed"

    def pytest_collectreport(self, report):
        # A module that cannot be imported is a failure; one that skips itself
        # (pytest.skip(allow_module_level=True)) is one skipped case.
        if report.failed:
            self.outcomes[report.nodeid or "collection"] = "failed"
        elif report.skipped:
            self.outcomes[report.nodeid] = "skipped"

    def count(self, outcome):
        return sum(1 for o in self.outcomes.values() if o == outcome)


def main(argv):
    if len(argv) != 2:
        print("usage: pytest_run.py TEST_FILE", file=sys.stderr)
        return 2
    # Before pytest is imported: its assertion rewriting honours this, and the test's own
    # child interpreters inherit the variable.
    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    try:
        import pytest
    except ImportError:
        print("skipped: pytest is not installed for %s (Debian: apt-get install python3-pytest)"
              % sys.executable)
        return SKIP
    counter = Counter()
    ret = pytest.main(["-p", "no:cacheprovider", "-q", "-rs", argv[1]], plugins=[counter])
    passed, failed, skipped = (counter.count("passed"), counter.count("failed"),
                               counter.count("skipped"))
    if passed + failed + skipped == 0 or ret not in (0, 5):
        # Nothing collected, a usage error, pytest's own crash, or a failure it saw that no
        # case report carried: never a pass.
        failed = max(failed, 1)
    line = "pytest: %d passed, %d failed, %d skipped" % (passed, failed, skipped)
    print(line)
    counts = os.environ.get("TRAINSCOPE_PYTEST_COUNTS")
    if counts:
        with open(counts, "a") as f:
            f.write(line + "\n")
    if failed:
        return 1
    return 0 if passed else SKIP


if __name__ == "__main__":
    sys.exit(main(sys.argv))
