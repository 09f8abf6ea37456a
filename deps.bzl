"""What a workspace that uses tpgraph as an external repository must set up.

    local_repository(name = "tpgraph", path = "/path/to/tpgraph")   # or http_archive
    load("@tpgraph//:deps.bzl", "tpgraph_deps")
    tpgraph_deps()

then depend on "@tpgraph//lib:tpgraph" (static) or "@tpgraph//lib:libtpgraph.so".

tpgraph's rules load the toolkit and NCCL from a repository named
"local_cuda" (tools/cuda/defs.bzl, lib/BUILD), so that name is fixed. The
finder (third_party/cuda/cuda_configure.bzl) reads $CUDA_PATH and $NCCL_HOME;
pass them with --action_env / --repo_env if they are not in /usr/local/cuda.

The CUTLASS headers of the Hopper GEMM candidates come from "tpgraph_cutlass"
(third_party/cutlass/cutlass_configure.bzl): $TPG_CUTLASS_HOME, else
~/.cache/tpgraph/cutlass-4.2.0.0, where tpgraph's tools/setup.sh installs the
pinned wheel.
"""

load("//third_party/cuda:cuda_configure.bzl", "cuda_configure")
load("//third_party/cutlass:cutlass_configure.bzl", "cutlass_configure")

def tpgraph_deps():
    """Declares @local_cuda unless the workspace already has it (its own finder wins), and @tpgraph_cutlass."""
    if not native.existing_rule("local_cuda"):
        cuda_configure(name = "local_cuda")
    if not native.existing_rule("tpgraph_cutlass"):
        cutlass_configure(name = "tpgraph_cutlass")
