#!/usr/bin/env python3
"""Prints the ninja targets a stage of tools/test.sh needs from a configured build, one a line:
the executables of the tests in the given suites and what those tests depend on, and with
--product every target defined outside tests/ (daemons, CLI, libraries, benchmarks). A stage
builds only these instead of the whole tree (e.g. the TSan build runs the 'threads' suite only).
Usage: tools/dev/suite_targets.py BUILD [--suite NAME ...] [--product]
"""

import argparse
import json
import os
import subprocess


def introspect(build, what):
    out = subprocess.run(["meson", "introspect", build, what], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--suite", action="append", default=[])
    p.add_argument("--product", action="store_true")
    a = p.parse_args()
    build = os.path.realpath(a.build)
    targets = introspect(build, "--targets")
    by_id = {t["id"]: t for t in targets}
    source_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    wanted = set()

    def add(t):
        for f in t["filename"]:
            wanted.add(os.path.relpath(f, build))

    if a.suite:
        for test in introspect(build, "--tests"):
            # Meson 1.0 names suites "project:suite".
            suites = {s.split(":")[-1] for s in test["suite"]}
            if not suites & set(a.suite):
                continue
            exe = os.path.realpath(test["cmd"][0])
            if exe.startswith(build + os.sep):
                wanted.add(os.path.relpath(exe, build))
            for dep in test.get("depends", []):
                if dep in by_id:
                    add(by_id[dep])
    if a.product:
        tests_dir = os.path.join(source_root, "tests") + os.sep
        for t in targets:
            if not os.path.realpath(t["defined_in"]).startswith(tests_dir):
                add(t)
    for w in sorted(wanted):
        print(w)


if __name__ == "__main__":
    main()
