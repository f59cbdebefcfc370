#!/usr/bin/env python3
"""Checks that every C++ file of a build also compiles with clang (front end only).

The project builds with GCC; users build with clang too (and the fuzz preset does), and some
C++20 that GCC takes, clang 14 (Debian 12's) does not: a lambda that captures a structured
binding, for one. This runs `clang++ -fsyntax-only` with each file's own flags from the build's
compile_commands.json and fails on the first file clang rejects, printing its errors.

It also checks the lock rules (-Wthread-safety as errors: GUARDED_BY, REQUIRES; see
common/mutex.h), after making sure the analysis is on: a snippet that reads a guarded field
without its mutex must be rejected.

Usage: clang-syntax-check.py BUILD/compile_commands.json [--clang clang++-14] [--jobs N]
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys

# GCC's options that clang does not know.
GCC_ONLY = {"-Wshadow=local", "-Wno-maybe-uninitialized"}


def clang_command(entry, clang):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [clang], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a not in GCC_ONLY and a != "-Werror":
            out.append(a)
    return out + ["-fsyntax-only", "-Wno-unknown-warning-option"] + THREAD_SAFETY


THREAD_SAFETY = ["-Wthread-safety", "-Werror=thread-safety"]
UNGUARDED = """#include "common/mutex.h"
struct Counter { tierpool::Mutex mu; int n GUARDED_BY(mu) = 0; };
int main() { Counter c; return ++c.n; }
"""


def analysis_is_on(clang, source_dir):
    """Whether clang rejects an unguarded access (otherwise the annotations check nothing)."""
    r = subprocess.run([clang, "-std=c++20", "-I", source_dir, "-x", "c++", "-", "-fsyntax-only"]
                       + THREAD_SAFETY, input=UNGUARDED, capture_output=True, text=True)
    return r.returncode != 0 and "requires holding mutex" in r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("compile_commands")
    ap.add_argument("--clang", default="clang++-14")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    if shutil.which(a.clang) is None:
        sys.exit(f"{a.clang} not found: scripts/install-deps.sh installs clang")
    source_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not analysis_is_on(a.clang, source_dir):
        sys.exit(f"{a.clang} let an access to a guarded field without its mutex through: "
                 "the thread-safety analysis is off (common/thread_annotations.h)")
    with open(a.compile_commands) as f:
        entries = [e for e in json.load(f) if e["file"].endswith((".cc", ".cpp", ".cxx"))]

    def check(e):
        r = subprocess.run(clang_command(e, a.clang), cwd=e["directory"], capture_output=True,
                           text=True)
        return e["file"], r.returncode, r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for path, rc, err in pool.map(check, entries):
            if rc != 0:
                failed += 1
                print(f"clang rejects {path}:\n{err}", flush=True)
    print(f"{len(entries)} files checked with {a.clang}, {failed} rejected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
