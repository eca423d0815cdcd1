#!/usr/bin/env python3
"""Names the tests that failed in a build directory's last `meson test` run, each with the last
lines of its output, for the end of tools/test.sh's log (CI keeps only the log's tail, and the
stage's own output is long gone by then; a later run in the same directory overwrites the log).

Usage: tools/dev/failed_tests.py BUILD_DIR STAGE [LINES]   (prints nothing when none failed)
"""
import json
import sys
from pathlib import Path

kFailed = {"FAIL", "TIMEOUT", "UNEXPECTEDPASS", "ERROR"}


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    log = Path(sys.argv[1]) / "meson-logs" / "testlog.json"
    stage = sys.argv[2]
    lines = int(sys.argv[3]) if len(sys.argv) == 4 else 12
    if not log.is_file():
        return 0
    for row in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            test = json.loads(row)
        except json.JSONDecodeError:
            continue
        if test.get("result") not in kFailed:
            continue
        print(f"-- {stage}: {test['result']} after {test.get('duration', 0):.0f} s: {test['name']}")
        out = (test.get("stdout") or "") + (test.get("stderr") or "")
        for line in out.rstrip("\n").splitlines()[-lines:]:
            print(f"   | {line[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
