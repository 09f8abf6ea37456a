#!/usr/bin/env python3
"""docs_check.py - the README and docs/ say only what the tree has.

What is checked, in README.md and every docs/*.md (CHANGELOG.md is history and
is not checked; a new page under docs/ is checked by being there):

1. Flags. The flags of `llama`, `tpbench` and `gemm_bench` come from each
   program's own usage text: `PROGRAM --help` is run (--bin NAME=PATH) and
   every `--name` in what it prints (stdout and stderr, whatever its exit
   status) is a flag it has; `--help` itself always is. A quoted flag is
   checked against that list when it belongs to one of the three:
   - in a command (a line of a fenced code block, backslash continuations
     joined, or a code span holding a space): every `--flag` after a word
     naming the program (`llama`, `.gpu/bin/llama`, `//examples/llama:llama`,
     `DIR/gemm_bench`, ...; not a `NAME=VALUE` word) up to the end of the
     command: `|`, `;`, `&&`, `||`, a `#` comment, the end of the line. A
     quoted string is a command of its own (`--ours "... llama --config 8b"`).
   - a bare flag (a code span starting with `--`, e.g. `--sweep` or
     `--attn tc`): its program is the one named last before it in the same
     paragraph (a table row is a paragraph), else in the same section (since
     the last heading). Naming counts in a command, a code span (`tpbench`)
     or a link (`[the example](examples/llama)`); a command of another
     program, or a code span naming a `.py` or `.sh` file, names a program
     that is not checked, so the bare flags after it are not.
2. Paths. Every repository path quoted must exist: a link target (relative to
   the page; `#anchor`s into a Markdown page must name one of its headings,
   GitHub's way), and in code spans and code blocks every word whose first
   part is a top-level entry of the repository (`lib/`, `docs/`, `.ci/`, ...;
   `{a,b}` lists and `*` globs must each match) or a Bazel label (`//pkg`,
   `//pkg:name`, `//pkg/...`: the package has a BUILD file naming `name`).
   Words holding `<`, `$` or `...` elsewhere than a label are placeholders.
3. The README's C. Every ```c block of README.md is a whole translation unit:
   compiled with `$CC -std=c11 -Wall -Wextra -Werror -pedantic -fPIC -I lib` and,
   with --lib, linked into a shared object against the library with
   `-Wl,--no-undefined`, so every tpg_ call it makes exists.

Prints one line per problem (`file:line: ...`), then a summary line; exits 1
when there is a problem or a program prints no usage, 2 on bad usage.
  python3 tools/docs_check.py --bin llama=PATH --bin tpbench=PATH \
      --bin gemm_bench=PATH --lib PATH/libtpgraph.so [--root DIR] [--cc gcc]
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

PROGRAMS = ("llama", "tpbench", "gemm_bench")
FLAG_RE = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
SEPARATORS = {"|", "||", "&&", ";", "&"}


def help_flags(name, path):
    """The flags a program's usage text names (its --help output)."""
    try:
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        sys.exit(f"docs_check: cannot run {name} --help ({path}): {e}")
    text = r.stdout + r.stderr
    flags = set(FLAG_RE.findall(text))
    if "usage" not in text.lower() or not flags:
        sys.exit(f"docs_check: {name} --help ({path}) printed no usage with flags:\n{text[:500]}")
    return flags


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"`|\*\*|\[|\]\([^)]*\)", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, out, fence = {}, set(), False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.lstrip().startswith(("```", "~~~")):
                    fence = not fence
                m = None if fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    s = slug(m.group(1))
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    out.add(s if n == 0 else f"{s}-{n}")
        cache[path] = out
    return cache[path]


class Checker:
    def __init__(self, root, flags):
        self.root = root
        self.flags = flags
        self.problems = []
        self.counts = {"flags": 0, "paths": 0}
        self.top = {e for e in os.listdir(root) if (not e.startswith(".") or e == ".ci") and not e.startswith("bazel-")}

    def problem(self, where, msg):
        self.problems.append(f"{where}: {msg}")

    # ---- paths ----------------------------------------------------------
    def expand(self, word):
        m = re.search(r"\{([^{}]*,[^{}]*)\}", word)
        if not m:
            return [word]
        out = []
        for alt in m.group(1).split(","):
            out += self.expand(word[: m.start()] + alt + word[m.end():])
        return out

    def exists(self, rel):
        full = os.path.join(self.root, rel)
        return bool(glob.glob(full)) if "*" in rel else os.path.exists(full)

    def check_label(self, where, label):
        body = label[2:]
        pkg, _, name = body.partition(":")
        if pkg.endswith("/...") or pkg == "...":
            pkg = pkg[:-4] if pkg != "..." else ""
            if not os.path.isdir(os.path.join(self.root, pkg)):
                self.problem(where, f"label {label}: no folder {pkg}")
            return
        build = next((os.path.join(self.root, pkg, b) for b in ("BUILD", "BUILD.bazel")
                      if os.path.isfile(os.path.join(self.root, pkg, b))), None)
        if not build:
            self.problem(where, f"label {label}: no BUILD file in {pkg or 'the root'}")
            return
        name = name or os.path.basename(pkg)
        with open(build, encoding="utf-8") as f:
            text = f.read()
        if f'"{name}"' not in text and not os.path.exists(os.path.join(self.root, pkg, name)):
            self.problem(where, f"label {label}: {os.path.relpath(build, self.root)} names no target {name}")

    def check_word(self, where, word):
        """A word of a code span or block: checked if it is a repository path or label."""
        w = re.sub(r"^['\"(\[`]+|['\")\],;:.`]+$", "", word)
        w = re.sub(r":\d+(-\d+)?$", "", w)  # file:line
        if w.startswith("//") and re.fullmatch(r"//[\w./-]*(:[\w.+-]+)?", w):
            self.counts["paths"] += 1
            self.check_label(where, w)
            return
        if "/" not in w or "<" in w or "$" in w or "..." in w or "=" in w or "@" in w:
            return
        w = w.split("#", 1)[0]
        if w.startswith("./"):
            w = w[2:]
        if w.split("/", 1)[0] not in self.top:
            return
        self.counts["paths"] += 1
        for alt in self.expand(w):
            if not self.exists(alt):
                self.problem(where, f"path {w} does not exist" + (f" ({alt})" if alt != w else ""))
                return

    def check_link(self, where, page, target):
        if re.match(r"[a-z]+:", target) or target.startswith("//"):
            return
        target = target.split()[0] if target.strip() else target
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        self.counts["paths"] += 1
        if not os.path.exists(full):
            self.problem(where, f"link {target}: {os.path.relpath(full, self.root)} does not exist")
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            self.problem(where, f"link {target}: {os.path.relpath(full, self.root)} has no heading #{anchor}")

    # ---- flags ----------------------------------------------------------
    @staticmethod
    def program_of(word):
        w = word.strip("'\"()[],;`")
        if "=" in w:  # NAME=VALUE: an assignment or an option's value, not a command
            return None
        for p in PROGRAMS:
            if w == p or w.endswith("/" + p) or w.endswith(":" + p):
                return p
        return None

    def check_flag(self, where, prog, word):
        m = FLAG_RE.match(word.strip("[](),;`|"))
        if not m:
            return
        self.counts["flags"] += 1
        if m.group(0) not in self.flags[prog] and m.group(0) != "--help":
            self.problem(where, f"{prog} has no flag {m.group(0)} (its --help does not name it)")

    def command(self, where, text):
        """One command line: paths in it, and the flags of our programs. Returns
        the last program named in it (None: none; '' another command)."""
        text = re.sub(r"(^|\s)#.*$", "", text)
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
        prog, last = None, None
        for w in words:
            if re.search(r"\s", w):  # a quoted string: a command of its own
                self.command(where, w)
                continue
            self.check_word(where, w)
            if w in SEPARATORS or w.endswith(";"):
                prog = None
                continue
            p = self.program_of(w)
            if p:
                prog = last = p
            elif prog and w.startswith("--"):
                self.check_flag(where, prog, w)
        if last is None and words and not words[0].startswith("--"):
            last = ""
        return last

    # ---- pages ----------------------------------------------------------
    def page(self, path):
        rel = os.path.relpath(path, self.root)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        fence, cont = None, ""
        section = para = None  # the program of the section's / paragraph's last command
        for i, line in enumerate(lines, 1):
            where = f"{rel}:{i}"
            s = line.lstrip()
            if fence is not None:
                if s.startswith(fence):
                    fence = None
                    continue
                if line.rstrip().endswith("\\"):
                    cont += line.rstrip()[:-1] + " "
                    continue
                p = self.command(where, cont + line)
                cont = ""
                if p is not None:
                    section = p
                continue
            m = re.match(r"(```+|~~~+)", s)
            if m:
                fence = m.group(1)
                continue
            if re.match(r"#{1,6}\s", line):
                section = None
            if not s or s.startswith("|") or re.match(r"#{1,6}\s", line):
                para = None  # a blank line, a heading, a table row: a new paragraph
            for m in re.finditer(r"(`+)(.+?)\1|!?\[([^\]]*)\]\(([^)\s]+)[^)]*\)", line):
                if m.group(4) is not None:
                    self.check_link(where, path, m.group(4))
                    p = self.program_of(m.group(4)) or self.program_of(m.group(3))
                else:
                    p = self.span(where, m.group(2).strip(), para if para is not None else section)
                if p is not None:
                    section = para = p

    def span(self, where, span, current):
        """One code span; returns the program it names ('' another), or None."""
        if span.startswith("--"):  # a bare flag: the paragraph's (else the section's) program
            if current:
                self.check_flag(where, current, span.split()[0])
            for w in span.split()[1:]:
                self.check_word(where, w)
            return None
        if " " in span:
            return self.command(where, span)
        self.check_word(where, span)
        if span.endswith((".py", ".sh")):
            return ""
        return self.program_of(span) if "." not in os.path.basename(span) else None


def c_blocks(readme):
    blocks, cur, start = [], None, 0
    with open(readme, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if cur is None and re.match(r"```\s*c\s*$", line.strip()):
                cur, start = [], i + 1
            elif cur is not None and line.strip().startswith("```"):
                blocks.append((start, "".join(cur)))
                cur = None
            elif cur is not None:
                cur.append(line)
    return blocks


def check_examples(chk, readme, cc, lib):
    rel = os.path.relpath(readme, chk.root)
    blocks = c_blocks(readme)
    with tempfile.TemporaryDirectory() as tmp:
        for n, (line, code) in enumerate(blocks):
            src, obj = os.path.join(tmp, f"example{n}.c"), os.path.join(tmp, f"example{n}.o")
            with open(src, "w", encoding="utf-8") as f:
                f.write(code)
            cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fPIC",
                   "-I", os.path.join(chk.root, "lib"), "-c", src, "-o", obj]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                err = "\n".join(r.stderr.strip().split("\n")[:12])
                chk.problem(f"{rel}:{line}", "the C example does not compile:\n" + err)
                continue
            if lib:
                so = os.path.join(tmp, f"example{n}.so")
                r = subprocess.run([cc, "-shared", "-o", so, obj, lib, "-Wl,--no-undefined"],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    chk.problem(f"{rel}:{line}", "the C example does not link against "
                                f"{os.path.basename(lib)}:\n" + r.stderr.strip())
    return len(blocks)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--bin", action="append", default=[], metavar="NAME=PATH",
                    help="a program whose --help lists its flags: " + ", ".join(PROGRAMS))
    ap.add_argument("--lib", help="libtpgraph.so to link the README's C against (compile only without)")
    ap.add_argument("--cc", default=os.environ.get("CC", "gcc"))
    a = ap.parse_args()
    bins = dict(b.split("=", 1) for b in a.bin if "=" in b)
    missing = [p for p in PROGRAMS if p not in bins]
    if missing:
        ap.error("--bin needed for " + ", ".join(missing))
    chk = Checker(os.path.abspath(a.root), {p: help_flags(p, bins[p]) for p in PROGRAMS})
    pages = [os.path.join(chk.root, "README.md")]
    pages += sorted(glob.glob(os.path.join(chk.root, "docs", "**", "*.md"), recursive=True))
    for p in pages:
        chk.page(p)
    examples = check_examples(chk, pages[0], a.cc, a.lib)
    for p in chk.problems:
        print(p)
    print(f"docs check: {len(pages)} pages, {chk.counts['flags']} flags, {chk.counts['paths']} paths, "
          f"{examples} C examples: {len(chk.problems)} problems")
    return 1 if chk.problems else 0


if __name__ == "__main__":
    sys.exit(main())
