#!/usr/bin/env python3
"""docs_check_test.py - tools/docs_check.py against deliberately broken copies.

A small repository is written to a temporary folder: a README with a
command, a bare flag, paths, a label, a link with an anchor and a C example,
a page under docs/, and three stand-in programs whose --help lists their
flags (gemm_bench's prints its usage on stderr and exits 2, as the real one
does). The good copy must pass (so the check can pass at all, and quoting
another program's flags is not mistaken for ours); each broken copy must
fail, naming what is wrong. Ends with "N passed, N failed".
  python3 tools/docs_check_test.py      (or: bazel test //tools:docs_check_test)
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "docs_check.py")
HEADER = os.path.join(HERE, "..", "lib", "tpgraph.h")

GOOD_README = """# demo

Run `tools/run.sh`, then:

```sh
bazel run //examples/llama:llama -- --config 8b --bench   # the main job
python3 tools/other.py --passes 2 --ours "LD_LIBRARY_PATH=x .gpu/bin/llama --config {c}" --json out.json
TPG_ARGS="--tokens 1" bash .gpu/suite.sh tpbench
```

The main job is [the example](examples/llama) with `--sweep`; `tpbench --tokens 1,16` and
`gemm_bench --zoo` are the others; `tools/other.py` takes `--passes` (not ours).
Label `//lib:tpgraph`; the header [lib/tpgraph.h](lib/tpgraph.h); see [a page](docs/a.md#a-section).

```c
#include "tpgraph.h"
int demo_version(void) { return tpg_version(); }
```
"""

GOOD_PAGE = """# A page

## A section

`llama --config 8b` runs; `--bench` times it. Back to the [README](../README.md).
"""

HELP = {
    "llama": ("usage: llama [flags]\n  --config 8b|70b\n  --bench\n  --sweep\n", 0, "out"),
    "tpbench": ("usage: tpbench [options]\n  --tokens LIST\n  -h, --help\n", 0, "out"),
    "gemm_bench": ("usage: gemm_bench [--check-only] [--zoo] [--m 1,3]\n", 2, "err"),
}

# (name, file, old text, new text, what the message must say)
BROKEN = [
    ("stale flag in a command", "README.md", "--config 8b --bench", "--config 8b --bench --gone",
     "llama has no flag --gone"),
    ("stale flag inside a quoted command", "README.md", ".gpu/bin/llama --config {c}",
     ".gpu/bin/llama --confg {c}", "llama has no flag --confg"),
    ("stale bare flag", "README.md", "with `--sweep`", "with `--sweeps`", "llama has no flag --sweeps"),
    ("stale flag of another program", "README.md", "`tpbench --tokens 1,16`", "`tpbench --token 1,16`",
     "tpbench has no flag --token"),
    ("stale flag of a usage printed on stderr", "README.md", "`gemm_bench --zoo`", "`gemm_bench --zoo2`",
     "gemm_bench has no flag --zoo2"),
    ("stale flag on a page under docs/", "docs/a.md", "`--bench` times", "`--benchmark` times",
     "llama has no flag --benchmark"),
    ("missing path in a code span", "README.md", "`tools/run.sh`", "`tools/gone.sh`",
     "path tools/gone.sh does not exist"),
    ("missing link target", "README.md", "[lib/tpgraph.h](lib/tpgraph.h)", "[lib/tpgraph.h](lib/tpgraph2.h)",
     "lib/tpgraph2.h does not exist"),
    ("missing anchor", "README.md", "docs/a.md#a-section", "docs/a.md#no-section",
     "has no heading #no-section"),
    ("missing Bazel target", "README.md", "`//lib:tpgraph`", "`//lib:tpgraph_gone`",
     "names no target tpgraph_gone"),
    ("C example that does not compile", "README.md", "return tpg_version();", "return tpg_no_such_call();",
     "the C example does not compile"),
]


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, mode)


def make_tree(root):
    write(os.path.join(root, "README.md"), GOOD_README)
    write(os.path.join(root, "docs", "a.md"), GOOD_PAGE)
    write(os.path.join(root, "tools", "run.sh"), "#!/bin/sh\n", 0o755)
    write(os.path.join(root, "tools", "other.py"), "", 0o755)
    write(os.path.join(root, "examples", "llama", "BUILD"), 'cc_binary(name = "llama")\n')
    write(os.path.join(root, "lib", "BUILD"), 'cc_library(name = "tpgraph")\n')
    shutil.copy(HEADER, os.path.join(root, "lib", "tpgraph.h"))
    bins = []
    for name, (text, rc, stream) in HELP.items():
        path = os.path.join(root, "bin", name)
        redirect = " >&2" if stream == "err" else ""
        write(path, "#!/bin/sh\ncat <<'EOF'%s\n%sEOF\nexit %d\n" % (redirect, text, rc), 0o755)
        bins += ["--bin", f"{name}={path}"]
    return bins


def run_check(root, bins):
    r = subprocess.run([sys.executable, CHECK, "--root", root] + bins, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        good = os.path.join(tmp, "good")
        bins = make_tree(good)
        rc, out = run_check(good, bins)
        if rc == 0 and "0 problems" in out:
            print("ok: the good copy passes")
            passed += 1
        else:
            print(f"FAIL: the good copy: exit {rc}\n{out}")
            failed += 1
        for name, rel, old, new, want in BROKEN:
            root = os.path.join(tmp, name.replace(" ", "_"))
            shutil.copytree(good, root, symlinks=True)
            bins_here = [b.replace(good, root) for b in bins]
            path = os.path.join(root, rel)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if old not in text:
                print(f"FAIL: {name}: the test's own text is stale ({old!r} not in {rel})")
                failed += 1
                continue
            write(path, text.replace(old, new, 1))
            rc, out = run_check(root, bins_here)
            if rc == 1 and want in out:
                print(f"ok: {name}: {want}")
                passed += 1
            else:
                print(f"FAIL: {name}: exit {rc} (1 expected), {want!r} expected in:\n{out}")
                failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
