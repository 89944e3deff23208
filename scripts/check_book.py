#!/usr/bin/env python3
"""Checks the mdBook sources and the built book (called by scripts/check-book).

Usage: check_book.py BOOK_DIR   (BOOK_DIR holds book.toml, src/ and the built book/)

Source checks, for every chapter (book/src/**/*.md):
  - every fenced code block names its language (an unlabeled block could be taken for Rust);
  - a ```rust block holds nothing but {{#include ...}} lines;
  - every {{#include path[:anchor]}} names a file that exists and is tracked by git (so CI
    has it); a named anchor has both `ANCHOR: name` and `ANCHOR_END: name` lines and
    something between them; Rust files are included by anchor or whole, never by line
    numbers (those drift silently when the file changes).
Built-book checks, for every page built from a chapter:
  - every relative href (and image src) resolves to a file of the built book (chapters,
    images, the API docs under api/, theme files), and its #fragment to an id in that file.
Exit status 0 when everything holds, 1 otherwise (every problem is listed, one per line).
"""

import html.parser
import os
import re
import subprocess
import sys
import urllib.parse

INCLUDE = re.compile(r"\{\{#(include|rustdoc_include)\s+([^}\s]+)\s*\}\}")
FENCE = re.compile(r"^(\s*)(```+|~~~+)(.*)$")


def tracked_files(repo):
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached"], cwd=repo, capture_output=True, check=True
    ).stdout
    return {os.path.normpath(os.path.join(repo, p)) for p in out.decode().split("\0") if p}


def check_include(md_path, spec, repo, tracked, problems):
    where = f"{md_path}: {{{{#include {spec}}}}}"
    parts = spec.split(":")
    target = os.path.normpath(os.path.join(os.path.dirname(md_path), parts[0]))
    if not os.path.isfile(target):
        problems.append(f"{where}: no such file {os.path.relpath(target, repo)}")
        return
    if target not in tracked:
        problems.append(f"{where}: {os.path.relpath(target, repo)} is not tracked by git")
    rest = parts[1:]
    if not rest or rest == [""]:
        return
    if len(rest) == 1 and not rest[0].isdigit():
        name = rest[0]
        with open(target, encoding="utf-8") as f:
            lines = f.read().splitlines()
        start = [i for i, l in enumerate(lines) if re.search(rf"ANCHOR:\s*{re.escape(name)}\b", l)]
        end = [i for i, l in enumerate(lines) if re.search(rf"ANCHOR_END:\s*{re.escape(name)}\b", l)]
        if not start:
            problems.append(f"{where}: no `ANCHOR: {name}` in {os.path.relpath(target, repo)}")
        elif not end:
            problems.append(f"{where}: no `ANCHOR_END: {name}` in {os.path.relpath(target, repo)}")
        elif end[0] <= start[0] + 1:
            problems.append(f"{where}: anchor {name} is empty")
        return
    if target.endswith(".rs"):
        problems.append(f"{where}: Rust included by line numbers; use an anchor")


def check_sources(src, repo, problems):
    tracked = tracked_files(repo)
    chapters = []
    includes = 0
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(".md"):
                continue
            path = os.path.join(dirpath, name)
            chapters.append(path)
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            fence = None  # (marker, lang, first line number)
            for no, line in enumerate(lines, 1):
                m = FENCE.match(line)
                if fence is None and m:
                    info = m.group(3).strip()
                    lang = info.split(",")[0].split()[0] if info else ""
                    if not lang:
                        problems.append(f"{path}:{no}: code block without a language")
                    fence = (m.group(2), lang, no)
                    continue
                if fence is not None and m and m.group(2).startswith(fence[0]) and not m.group(3).strip():
                    fence = None
                    continue
                for inc in INCLUDE.finditer(line):
                    includes += 1
                    check_include(path, inc.group(2), repo, tracked, problems)
                if fence is not None and fence[1] == "rust" and line.strip():
                    if not INCLUDE.fullmatch(line.strip()):
                        problems.append(
                            f"{path}:{no}: Rust code pasted into the book (rust blocks may only "
                            f"hold {{{{#include}}}} lines of compiled files)"
                        )
            if fence is not None:
                problems.append(f"{path}:{fence[2]}: code block never closed")
    return chapters, includes


class Refs(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("id", "name") and v:
                self.ids.add(v)
            if (k == "href" or (tag == "img" and k == "src")) and v is not None:
                self.hrefs.append(v)


_ids_cache = {}


def ids_of(path):
    if path not in _ids_cache:
        p = Refs()
        with open(path, encoding="utf-8", errors="replace") as f:
            p.feed(f.read())
        _ids_cache[path] = p.ids
    return _ids_cache[path]


def check_links(src, out, chapters, problems):
    checked = 0
    for md in chapters:
        rel = os.path.relpath(md, src)
        if rel == "SUMMARY.md":
            continue
        page = os.path.join(out, rel[:-3] + ".html")
        if not os.path.isfile(page):
            problems.append(f"{md}: not built (is it listed in SUMMARY.md?)")
            continue
        p = Refs()
        with open(page, encoding="utf-8") as f:
            p.feed(f.read())
        for href in p.hrefs:
            url = urllib.parse.urlsplit(href)
            if url.scheme or url.netloc or href.startswith("/"):
                continue
            checked += 1
            path = urllib.parse.unquote(url.path)
            target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if os.path.isdir(target):
                target = os.path.join(target, "index.html")
            if not os.path.isfile(target):
                problems.append(f"{md}: link {href!r}: {os.path.relpath(target, out)} does not exist")
                continue
            frag = urllib.parse.unquote(url.fragment)
            if frag and target.endswith(".html") and frag not in ids_of(target):
                problems.append(f"{md}: link {href!r}: no #{frag} in {os.path.relpath(target, out)}")
    return checked


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    book = os.path.abspath(sys.argv[1])
    src, out = os.path.join(book, "src"), os.path.join(book, "book")
    repo = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=book, capture_output=True, text=True, check=True
    ).stdout.strip()
    problems = []
    chapters, includes = check_sources(src, repo, problems)
    links = check_links(src, out, chapters, problems)
    for p in problems:
        print("check-book: " + p.replace(repo + os.sep, ""))
    if problems:
        print(f"check-book: FAILED: {len(problems)} problem(s)")
        return 1
    print(
        f"check-book: ok: {len(chapters)} pages, {includes} includes, {links} relative links checked"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
