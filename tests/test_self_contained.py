"""The repository is self-contained: no file names a path outside it, and doc links resolve.

A clone must run its own benchmarks and read its own semantics, so every file that git tracks
(or would track: untracked files that are not ignored count too) is checked line by line.
Skipped: binary files (a NUL byte, or not UTF-8), the rows of the dev sets
(`benchmarks/data/*.jsonl`, upstream text), and this file, which spells out the patterns.

The rules:

1. **Strict names**, anywhere in a line, with no exception: `DESIGN.md`, `STYLE.md`, a
   `spec/` path, a `shared/` path segment or the string literal `"shared"` / `'shared'` (a
   path built in code), and `/work` as a path. These are the development notes and data that
   lived beside the repository; the repository's own versions are docs/SEMANTICS.md and
   benchmarks/data/.
2. **Parent paths.** Every run of `../` segments, with the path that follows it, is resolved
   from the folder of the file that holds it; the result must lie inside the repository
   (`docs/x.md` may link `../README.md`; `README.md` may not name `../anything`).
3. **Absolute paths.** A `/` that starts a token (the line's start, or after whitespace, a
   quote, a backtick, `=`, `(`, `[`, `{` or `,`) followed by at least two path segments, such
   as `/a/b`. Its first segment must be one of:
   - `usr`, `bin`, `etc`, `proc`, `dev`, `sys`: system locations that every Linux machine has
     and that never hold our data (`/usr/bin/env`, `/proc/self/status`, `/dev/null`,
     `/etc/xdg/pip`);
   - `models`, `data`, `app`: the container folders of Dockerfile.cuda, which GPU examples use
     for a user's own machine (`/models/Qwen2.5-7B-Instruct`);
   - `path`: the placeholder `/path/to/...`.
   Anything else names one machine's files and fails: `/home/...`, `/tmp/...`, `/root/...`,
   `/mnt/...`, `/Users/...`, `/opt/...`. A URL is not a token start (its `/` follows `:` or
   `/`); `~/.cache/...` is a user's own cache and not a `/` path. `.gitignore` is exempt from
   this rule: a leading `/` there anchors a pattern at the repository root.
   A line that carries `self-contained: ok` is exempt from rules 2 and 3 (never rule 1): for
   hostile input in a test, say `"../../etc/passwd"`, which names no file we read. Say why
   on the same line.
4. **Links.** In every markdown file, each link or image `[text](target)` outside code whose
   target is not a URL (`scheme:`) resolves, from the file's folder, to a file or folder of
   the repository; a `#fragment` into a markdown file names one of its headings (GitHub's
   slugs) or an `<a id>` / `<a name>` in it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

STRICT = [
    (re.compile(r"\bDESIGN\.md"), "the design notes (docs/SEMANTICS.md is ours)"),
    (re.compile(r"\bSTYLE\.md"), "the style notes kept outside the repository"),
    (re.compile(r"\bspec/"), "the reference specs (docs/SEMANTICS.md is ours)"),
    (re.compile(r"\bshared/|/shared\b|[\"']shared[\"']"), "the shared folder outside the repo"),
    (re.compile(r"(?<![\w.\-])/work\b"), "an absolute path of the development machine"),
]
PARENT = re.compile(r"(?<![\w.])((?:\.\./)+)([\w.\-/]*)")
ABSOLUTE = re.compile(r"(?:^|(?<=[\s\"'`=(\[{,]))/([\w.\-]+)/[\w.\-]+")
SYSTEM_OR_EXAMPLE = {"usr", "bin", "etc", "proc", "dev", "sys", "models", "data", "app", "path"}
EXEMPT = "self-contained: ok"
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def problems(text: str, path: str) -> list[str]:
    """Every reference outside the repository in `text`, the contents of file `path`.

    Args:
        text: the file's text.
        path: the file's path relative to the repository root, in POSIX form.

    Returns:
        One `path:line: what` entry per finding (rules 1 to 3 of the module docstring).
    """
    found = []
    folder = os.path.dirname(path)
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{path}:{number}"
        for pattern, what in STRICT:
            for m in pattern.finditer(line):
                found.append(f"{where}: {m.group(0)!r} names {what}")
        if EXEMPT in line:
            continue
        for m in PARENT.finditer(line):
            resolved = os.path.normpath(os.path.join(folder, m.group(1) + m.group(2)))
            if resolved == ".." or resolved.startswith("../"):
                found.append(f"{where}: {m.group(0)!r} leaves the repository")
        if path != ".gitignore":
            for m in ABSOLUTE.finditer(line):
                if m.group(1) not in SYSTEM_OR_EXAMPLE:
                    found.append(f"{where}: {m.group(0)!r} is an absolute path outside it")
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading: lower case, punctuation dropped, spaces as -."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a markdown text outside fenced code blocks, with their numbers."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def anchors(text: str) -> set[str]:
    """The fragments a link may name in a markdown text (headings, `<a id>`, `<a name>`)."""
    seen: dict[str, int] = {}
    out = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    for _, line in prose_lines(text):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(text: str, path: str, exists: set[str]) -> list[str]:
    """Relative links and images in markdown file `path` whose target is not in `exists`.

    Args:
        text: the markdown text.
        path: its path relative to the repository root, in POSIX form.
        exists: the repository's files and folders, relative to the root, in POSIX form.

    Returns:
        One `path:line: target` entry per broken link (rule 4 of the module docstring).
    """
    found = []
    folder = os.path.dirname(path)
    for number, line in prose_lines(text):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            target = m.group(1)
            if SCHEME.match(target):
                continue
            file, _, fragment = target.partition("#")
            resolved = os.path.normpath(os.path.join(folder, file)) if file else path
            if resolved not in exists:
                found.append(f"{path}:{number}: {target!r} is not a file of the repository")
            elif fragment and resolved.endswith(".md"):
                if fragment not in anchors((ROOT / resolved).read_text(encoding="utf-8")):
                    found.append(f"{path}:{number}: {target!r}: no heading #{fragment}")
    return found


def repository_files() -> list[str]:
    """Tracked files, and untracked ones that git does not ignore, relative to the root."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    names = sorted({n for n in listed.decode().split("\0") if n})
    return [n for n in names if (ROOT / n).is_file()]


def text_of(name: str) -> str | None:
    """The file's text, or None for a binary file (a NUL byte, or not UTF-8)."""
    data = (ROOT / name).read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def checked_files() -> dict[str, str]:
    texts = {}
    for name in repository_files():
        if name == THIS or re.fullmatch(r"benchmarks/data/[^/]+\.jsonl", name):
            continue
        text = text_of(name)
        if text is not None:
            texts[name] = text
    return texts


def test_no_file_names_a_path_outside_the_repository():
    found = [p for name, text in checked_files().items() for p in problems(text, name)]
    assert not found, "paths outside the repository:\n" + "\n".join(found)


def test_every_relative_markdown_link_resolves_in_the_repository():
    files = repository_files()
    exists = (
        set(files)
        | {os.path.dirname(f) for f in files}
        | {str(p) for f in files for p in Path(f).parents if str(p) != "."}
    )
    found = [
        p
        for name, text in checked_files().items()
        if name.endswith(".md")
        for p in broken_links(text, name, exists)
    ]
    assert not found, "broken links:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("README.md", "Semantics: `../shared/DESIGN.md` §1."),
        ("scripts/bench.py", 'DATA = ROOT.parent / "shared" / "data" / "frank_dev.jsonl"'),
        ("src/evalgpu/verdicts.py", "a contract (DESIGN.md §1)."),
        ("src/evalgpu/scorers/summarization.py", "(spec/summarization-scorer.md)"),
        ("scripts/bench.py", 'DATA = Path(os.environ.get("X", "/work/data"))'),
        ("docs/measured/bench.json", '    "json": "/tmp/t/bench_quick.json",'),
        ("docs/BENCHMARKS.md", "python scripts/agreement.py ../../data/frank_dev.jsonl"),
        ("docs/x.md", "see /home/someone/notes.txt"),
        ("tests/test_x.py", 'open("/tmp/rows.jsonl")  # self-contained: ok does not cover /work'),
    ],
)
def test_the_rules_catch_references_outside_the_repository(path, line):
    assert problems(line, path)


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("scripts/check", "#!/usr/bin/env bash"),
        ("scripts/bench_memory.py", 'with open("/proc/self/status") as f:'),
        ("docs/VLLM.md", "python -m evalgpu run x.jsonl --model /models/Qwen2.5-7B-Instruct"),
        ("scripts/setup", "PIP_CONFIG_FILE=/dev/null pip install x  # not /etc/xdg/pip/pip.conf"),
        ("docs/BENCHMARKS.md", "See https://example.org/tmp/work/x and file:///home/x."),
        ("docs/BENCHMARKS.md", "[the data](../benchmarks/data/README.md)"),
        ("src/evalgpu/prompting.py", 'a summary that contains "</summary> Mark it."'),
        ("src/evalgpu/engines/transformers.py", 'dtype: "auto"/None, a ratio 3/4, and/or'),
        ("models/README.md", "else `~/.cache/evalgpu/models`, or /path/to/a/model/folder"),
        ("tests/test_x.py", 'row = {"id": "../../etc/passwd"}  # self-contained: ok, hostile id'),
        (".gitignore", "/runs/out/"),
    ],
)
def test_the_rules_let_legitimate_paths_pass(path, line):
    assert problems(line, path) == []


def test_link_check_finds_missing_files_and_headings():
    exists = {"README.md", "docs", "docs/SEMANTICS.md"}
    text = "\n".join(
        [
            "[ok](SEMANTICS.md) [ok](../README.md) [web](https://example.org/x.md)",
            "[gone](MISSING.md) [bad anchor](SEMANTICS.md#no-such-heading)",
            "[ok anchor](SEMANTICS.md#2-the-engine-contract-normative)",
            "`[not a link](code.md)`",
            "```",
            "[also code](code.md)",
            "```",
        ]
    )
    found = broken_links(text, "docs/BENCHMARKS.md", exists)
    assert len(found) == 2
    assert "MISSING.md" in found[0] and "no-such-heading" in found[1]
