#!/usr/bin/python3
"""Every link from the code to the docs points at something that exists (#74, item 6).

Scans the tracked sources (C++, CUDA, Python, CMake, shell) for `docs/<file>.md` and, where a
quoted section follows it ("docs/protocol.md, "Peer protocol""), checks that the file exists and
has a heading (or a paragraph's bold run-in head) that contains the section's words. A comment wrapped over lines is read as one
line. Prints each broken link as path:line and exits 1 if there is any.

Usage: scripts/check-doc-links.py [repository root]
"""
import os
import re
import subprocess
import sys

SOURCES = (".cc", ".h", ".cu", ".py", ".cmake", ".sh", "CMakeLists.txt")
# A comment's continuation: the end of a line, then the next line's indent and comment leader.
CONTINUATION = re.compile(r"\n[ \t]*(?://+|#+|\*)?[ \t]*")
LINK = re.compile(r'docs/([A-Za-z0-9_./-]+\.md)(?:,?\s*"([^"\n]{1,200})")?')
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
# A paragraph's bold run-in head ("**I/O threads.** ..."), which the docs use as a small section.
RUN_IN = re.compile(r"^(?:[-*]\s+)?\*\*([^*\n]{1,120})\*\*", re.M)


def words(text):
    return " ".join(re.sub(r"[`*_]", "", text).lower().split())


def headings(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
            cache[path] = [words(h) for h in HEADING.findall(text) + RUN_IN.findall(text)]
    return cache[path]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), ".."))
    try:
        files = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                               text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # a source tree without git
        files = [os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root)
                 if "/build" not in d and "/." not in d for f in names]
    broken = []
    checked = 0
    for rel in files:
        if not rel.endswith(SOURCES) or rel.startswith("scripts/check-doc-links"):
            continue
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        # Joined, with a map back to line numbers: offsets in `flat` -> line in the file.
        flat, lines, line, last = [], [], 1, 0
        for m in CONTINUATION.finditer(text):
            flat.append(text[last:m.start()])
            lines.append((sum(len(p) for p in flat), line))
            flat.append(" ")
            line += 1
            last = m.end()
        flat.append(text[last:])
        flat = "".join(flat)
        for m in LINK.finditer(flat):
            doc, section = m.group(1), m.group(2)
            at = next((ln for end, ln in lines if end >= m.start()), line)
            where = "%s:%d" % (rel, at)
            path = os.path.join(root, "docs", doc)
            checked += 1
            if not os.path.isfile(path):
                broken.append("%s: docs/%s does not exist" % (where, doc))
            elif section and not any(words(section) in h for h in headings(path)):
                broken.append('%s: docs/%s has no section "%s"' % (where, doc, section))
    for b in broken:
        print(b)
    print("%d links from the code to the docs checked, %d broken" % (checked, len(broken)))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
