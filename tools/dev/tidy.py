#!/usr/bin/env python3
"""clang-tidy over every C++ source git tracks that BUILD's compile database compiles (each file
once: the fuzz targets compile some sources a second time), --jobs at a time, with the
repository's .clang-tidy (every finding an error). Called by tools/lint.sh.

Results are cached: a file passes without being analysed again when its preprocessed text (what
the compiler sees, headers included), the clang-tidy version and .clang-tidy are all unchanged
since it last passed (a folder's own .clang-tidy counts too). The cache lives in $TRAINSCOPE_TIDY_CACHE (default ~/.cache/
trainscope-tidy; "off": no cache) and holds empty marker files only. The preprocessed text has
no comments, so a NOLINT removed since a file passed is not seen through the cache: CI's tidy
stage, which checks only the files a change touched, runs without it.

Prints the findings, then one line: files, files with findings, files unchanged since they
passed, seconds. Exit status 1 when any file has findings.
"""

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def entries(build):
    tracked = set(subprocess.run(["git", "ls-files", "*.cpp"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split())
    seen = {}
    with open(os.path.join(build, "compile_commands.json")) as f:
        for e in json.load(f):
            path = os.path.relpath(os.path.join(e["directory"], e["file"]), ROOT)
            if path in tracked and path not in seen:
                seen[path] = e
    return seen


def local_configs(path):
    """The .clang-tidy files between the source's folder and the root's (which inherit from it),
    innermost first, as one key part."""
    out = b""
    folder = os.path.dirname(os.path.join(ROOT, path))
    while os.path.abspath(folder) != ROOT and folder.startswith(ROOT):
        config = os.path.join(folder, ".clang-tidy")
        if os.path.exists(config):
            with open(config, "rb") as f:
                out += os.path.relpath(config, ROOT).encode() + b"\0" + f.read()
        folder = os.path.dirname(folder)
    return out


def preprocessed(entry):
    """What the compiler sees for this entry: its command with -E -P instead of -c -o."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MQ", "-MT"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    r = subprocess.run(out + ["-E", "-P"], cwd=entry["directory"], capture_output=True)
    return r.stdout if r.returncode == 0 else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--file", action="append", default=[],
                   help="only this source (repeatable; default: every one in the database)")
    a = p.parse_args()
    build = os.path.join(ROOT, a.build) if not os.path.isabs(a.build) else a.build
    cache = os.environ.get("TRAINSCOPE_TIDY_CACHE",
                           os.path.expanduser("~/.cache/trainscope-tidy"))
    if cache == "off":
        cache = None
    else:
        os.makedirs(cache, exist_ok=True)
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True).stdout
    with open(os.path.join(ROOT, ".clang-tidy"), "rb") as f:
        config = version.encode() + f.read()

    def one(item):
        path, entry = item
        text = preprocessed(entry) if cache else None
        key = None
        if text is not None:
            key = hashlib.sha256(config + local_configs(path) + b"\0" + path.encode() + b"\0" +
                                 text).hexdigest()
            if os.path.exists(os.path.join(cache, key)):
                return path, "cached", ""
        r = subprocess.run(["clang-tidy", "-p", build, "--quiet", path], cwd=ROOT,
                           capture_output=True, text=True)
        if r.returncode == 0:
            if key:
                open(os.path.join(cache, key), "w").close()
            return path, "ok", ""
        return path, "failed", r.stdout + r.stderr

    start = time.time()
    files = sorted(entries(build).items())
    if a.file:
        wanted = {os.path.normpath(f) for f in a.file}
        files = [(path, e) for path, e in files if path in wanted]
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = list(pool.map(one, files))
    failed = [r for r in results if r[1] == "failed"]
    for path, _, log in failed:
        lines = [l for l in log.splitlines() if "warnings generated" not in l
                 and not l.startswith("Suppressed ") and "-header-filter" not in l]
        print("\n".join(lines))
    cached = sum(1 for r in results if r[1] == "cached")
    print(f"lint: clang-tidy: {len(results)} files, {len(failed)} with findings, {cached} "
          f"unchanged since they passed ({time.time() - start:.0f} s, {a.jobs} jobs)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
