"""Two small rules for CUDA code under Bazel 4.2.3, which has none built in.

cuda_fatbin: device-only code. nvcc -fatbin per source, for the archs in
  //tools/cuda:archs, embedded into a cc_library through an assembler
  `.incbin`, plus a C table naming each blob. The host library loads the
  blobs with the driver API (cuLibraryLoadData), so it never links the CUDA
  runtime.
cuda_objects: host+device code for tests and benchmarks that use the CUDA
  runtime (and cuBLAS). Compiles .cu to PIC objects for a cc_library.
"""

load("@local_cuda//:defs.bzl", "NVCC")

ArchsInfo = provider(fields = ["archs"])

def _cuda_archs_impl(ctx):
    archs = [a.strip() for a in ctx.build_setting_value.split(",") if a.strip()]
    for a in archs:
        if not (a.startswith("sm_") or a.startswith("compute_")):
            fail("//tools/cuda:archs: '%s' is neither sm_XX (SASS) nor compute_XX (PTX)" % a)
    return ArchsInfo(archs = archs)

cuda_archs = rule(
    implementation = _cuda_archs_impl,
    build_setting = config.string(flag = True),
)

def _gencode(archs):
    flags = []
    for a in archs:
        num = a.split("_", 1)[1]
        if a.startswith("sm_"):
            flags.append("-gencode=arch=compute_%s,code=sm_%s" % (num, num))
        else:
            flags.append("-gencode=arch=compute_%s,code=compute_%s" % (num, num))
    return flags

def _nvcc_common(ctx):
    # Sources include "kernels/x.cuh" relative to this repository's root. That
    # root is the exec root when tpgraph is the main workspace but
    # external/<name> when another workspace uses it (local_repository,
    # http_archive), so name it instead of "-I.".
    root = ctx.label.workspace_root or "."
    gen = ctx.bin_dir.path + ("/" + ctx.label.workspace_root if ctx.label.workspace_root else "")
    return ["-std=c++17", "-O3", "-I" + root, "-I" + gen, "--expt-relaxed-constexpr"] + ctx.attr.copts

def _cuda_fatbin_compile_impl(ctx):
    archs = ctx.attr._archs[ArchsInfo].archs
    hdrs = depset(ctx.files.hdrs)
    outs = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(src.extension) - 1]
        out = ctx.actions.declare_file("%s_%s.fatbin" % (ctx.label.name, stem))
        args = ["-fatbin"] + _nvcc_common(ctx) + _gencode(archs) + ["-o", out.path, src.path]
        ctx.actions.run(
            executable = NVCC,
            arguments = args,
            inputs = depset([src], transitive = [hdrs]),
            outputs = [out],
            mnemonic = "NvccFatbin",
            progress_message = "nvcc -fatbin %s (%s)" % (src.short_path, ",".join(archs)),
            use_default_shell_env = True,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

# Compiles each source to a fatbin. cuda_fatbin requests it in the exec
# configuration: the device code does not depend on the host compiler's
# options, and this way --config=asan / tsan (their own --platform_suffix
# output trees) and every other target configuration reuse one build of it
# instead of running nvcc again (minutes per configuration for the CUTLASS
# kernels). //tools/cuda:archs reaches the exec configuration unchanged.
_cuda_fatbin_compile = rule(
    implementation = _cuda_fatbin_compile_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "copts": attr.string_list(),
        "_archs": attr.label(default = "//tools/cuda:archs"),
    },
)

def _cuda_fatbin_impl(ctx):
    archs = ctx.attr._archs[ArchsInfo].archs
    fatbins = []

    # Copies in this configuration's bin folder, under the names CMake's
    # TPGRAPH_PREBUILT_KERNELS looks for (<name>_<stem>.fatbin.inc in
    # bazel-bin/kernels): the .S below names them, and CI's CMake pass reuses them.
    for f in ctx.files.compiled:
        stem = f.basename[len(ctx.attr.compiled.label.name) + 1:-len(".fatbin")]
        out = ctx.actions.declare_file("%s_%s.fatbin.inc" % (ctx.label.name, stem))
        ctx.actions.run_shell(
            inputs = [f],
            outputs = [out],
            command = "cp %s %s" % (f.path, out.path),
            mnemonic = "CopyFatbin",
            progress_message = "copying the fatbin of %s" % stem,
        )
        fatbins.append((stem, out))

    # One assembler file embeds every blob; one C file lists them. The .S is
    # written by an action that reads the fatbins and records their digests
    # in it: the compiler's dependency file does not list .incbin inputs, so
    # Bazel would otherwise drop them from the assembly's inputs and keep a
    # stale object after a kernel changed.
    asm = ctx.actions.declare_file(ctx.label.name + "_embed.S")
    lines = []
    for stem, f in fatbins:
        sym = "%s_%s" % (ctx.attr.symbol, stem)
        lines += [
            "  .section .rodata.%s,\\\"a\\\"" % sym,
            "  .balign 64",
            "  .globl %s_start" % sym,
            "  .hidden %s_start" % sym,
            "%s_start:" % sym,
            "  .incbin \\\"%s\\\"" % f.path,
            "  .globl %s_end" % sym,
            "  .hidden %s_end" % sym,
            "%s_end:" % sym,
            "  .byte 0",
        ]
    lines.append("  .section .note.GNU-stack,\\\"\\\",@progbits")
    cmd = "set -e; { for f in %s; do echo \"  # $(sha256sum $f)\"; done; printf '%%s\\n' %s; } > %s" % (
        " ".join([f.path for _, f in fatbins]),
        " ".join(["\"%s\"" % l for l in lines]),
        asm.path,
    )
    ctx.actions.run_shell(
        inputs = [f for _, f in fatbins],
        outputs = [asm],
        command = cmd,
        mnemonic = "EmbedFatbin",
        progress_message = "embedding %d fatbins" % len(fatbins),
    )

    table = ctx.actions.declare_file(ctx.label.name + "_table.c")
    c = ["/* Generated by //tools/cuda:defs.bzl cuda_fatbin: the embedded device code. */",
         "#include <stddef.h>",
         "#include \"lib/embedded.h\""]
    for stem, _ in fatbins:
        sym = "%s_%s" % (ctx.attr.symbol, stem)
        c.append("extern const unsigned char %s_start[], %s_end[];" % (sym, sym))
    c.append("const tpg_embedded_blob %s[] = {" % ctx.attr.symbol)
    for stem, _ in fatbins:
        sym = "%s_%s" % (ctx.attr.symbol, stem)
        c.append("  { \"%s\", %s_start, %s_end }," % (stem, sym, sym))
    c.append("  { NULL, NULL, NULL }")
    c.append("};")
    c.append("const char %s_archs[] = \"%s\";" % (ctx.attr.symbol, ",".join(archs)))
    ctx.actions.write(table, "\n".join(c) + "\n")
    return [DefaultInfo(files = depset([asm, table] + [f for _, f in fatbins]))]

_cuda_fatbin = rule(
    implementation = _cuda_fatbin_impl,
    attrs = {
        "compiled": attr.label(cfg = "exec"),
        "symbol": attr.string(mandatory = True),
        "_archs": attr.label(default = "//tools/cuda:archs"),
    },
)

def cuda_fatbin(name, srcs, symbol, hdrs = [], copts = [], deps = [], visibility = None):
    """A cc_library that embeds srcs compiled for //tools/cuda:archs.

    It defines `const tpg_embedded_blob <symbol>[]` (NULL-terminated) and
    `const char <symbol>_archs[]`; see lib/embedded.h. Source stems must be
    unique (they name the blobs). nvcc runs once for every configuration
    (see _cuda_fatbin_compile).
    """
    _cuda_fatbin_compile(name = name + "_nvcc", srcs = srcs, hdrs = hdrs, copts = copts)
    _cuda_fatbin(name = name + "_gen", compiled = ":" + name + "_nvcc", symbol = symbol)
    native.cc_library(
        name = name,
        srcs = [":" + name + "_gen"],
        deps = deps + ["//lib:embedded_hdr"],
        visibility = visibility,
        alwayslink = True,
    )

def _cuda_objects_impl(ctx):
    archs = ctx.attr._archs[ArchsInfo].archs
    hdrs = depset(ctx.files.hdrs)
    outs = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(src.extension) - 1]
        out = ctx.actions.declare_file("_objs_cuda/%s/%s.pic.o" % (ctx.label.name, stem))
        args = ["-c", "-Xcompiler", "-fPIC"] + _nvcc_common(ctx) + _gencode(archs) + ["-o", out.path, src.path]
        ctx.actions.run(
            executable = NVCC,
            arguments = args,
            inputs = depset([src], transitive = [hdrs]),
            outputs = [out],
            mnemonic = "NvccCompile",
            progress_message = "nvcc -c %s" % src.short_path,
            use_default_shell_env = True,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "copts": attr.string_list(),
        "_archs": attr.label(default = "//tools/cuda:archs"),
    },
)

def cuda_objects(name, srcs, hdrs = [], copts = [], deps = [], testonly = False, visibility = None):
    """A cc_library of host+device objects that use the CUDA runtime (tests, benchmarks)."""
    _cuda_objects(name = name + "_gen", srcs = srcs, hdrs = hdrs, copts = copts, testonly = testonly)
    native.cc_library(
        name = name,
        srcs = [":" + name + "_gen"],
        deps = deps + ["@local_cuda//:cudart_static"],
        testonly = testonly,
        visibility = visibility,
        alwayslink = True,
    )

def _cuda_host_object_impl(ctx):
    src = ctx.file.src
    raw = ctx.actions.declare_file("_objs_cuda/%s/%s.raw.o" % (ctx.label.name, src.basename))
    out = ctx.actions.declare_file("_objs_cuda/%s/%s.o" % (ctx.label.name, src.basename))

    # The device half of this translation unit is never launched (the kernels
    # come from the fatbins): PTX for one target, no ptxas.
    args = ["-c", "-x", "cu", "-Xcompiler", "-fPIC,-fvisibility=hidden", "-DNDEBUG"] + _nvcc_common(ctx) + [
        "-gencode=arch=compute_90a,code=compute_90a",
        "-o",
        raw.path,
        src.path,
    ]
    ctx.actions.run(
        executable = NVCC,
        arguments = args,
        inputs = depset([src], transitive = [depset(ctx.files.hdrs)]),
        outputs = [raw],
        mnemonic = "NvccHost",
        progress_message = "nvcc -c (host code) %s" % src.short_path,
        use_default_shell_env = True,
    )

    # Every reference to the CUDA runtime (nvcc's registration of the TU,
    # helpers compiled in but never called) is renamed to <prefix><name>,
    # which the library defines as no-ops; then nothing of the runtime or of
    # libstdc++ may be left (a C11 library without either).
    cmd = """set -e
nm -u {raw} | awk '$2 ~ /^_*cuda/ {{ print $2 " {prefix}" $2 }}' > {out}.syms
objcopy --redefine-syms={out}.syms {raw} {out}
rm -f {out}.syms
bad=$(nm -u {out} | awk '{{print $2}}' | grep -E '^(_*cuda|_Z|__cxa_(throw|allocate|begin|end|rethrow|guard)|__gxx_personality)' || true)
if [ -n "$bad" ]; then
  echo "{src}: the object refers to the CUDA runtime or libstdc++, which the library does not link:" >&2
  echo "$bad" >&2
  exit 1
fi
""".format(raw = raw.path, out = out.path, prefix = ctx.attr.rename_prefix, src = src.short_path)
    ctx.actions.run_shell(
        inputs = [raw],
        outputs = [out],
        command = cmd,
        mnemonic = "HostObjectCheck",
        progress_message = "renaming CUDA runtime references in %s" % src.short_path,
    )
    return [DefaultInfo(files = depset([out]))]

_cuda_host_object_nvcc = rule(
    implementation = _cuda_host_object_impl,
    attrs = {
        "src": attr.label(allow_single_file = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "copts": attr.string_list(),
        "rename_prefix": attr.string(mandatory = True),
    },
)

# The exec-configuration object, copied to this configuration's bin folder as
# <name>.o (bazel-bin/<package>/<name>.o), where CMake's
# TPGRAPH_PREBUILT_KERNELS reuse finds it (cmake/tpgraph_kernels.cmake).
def _exec_object_impl(ctx):
    src = ctx.file.src
    out = ctx.actions.declare_file(ctx.attr.out)
    ctx.actions.run_shell(
        inputs = [src],
        outputs = [out],
        command = "cp %s %s" % (src.path, out.path),
        mnemonic = "CopyObject",
        progress_message = "copying %s" % ctx.attr.out,
    )
    return [DefaultInfo(files = depset([out]))]

_exec_object = rule(
    implementation = _exec_object_impl,
    attrs = {
        "src": attr.label(cfg = "exec", allow_single_file = True),
        "out": attr.string(mandatory = True),
    },
)

def cuda_host_object(name, src, rename_prefix, srcs = [], hdrs = [], copts = [], c_copts = [], deps = [], visibility = None):
    """A cc_library of one .cu compiled by nvcc as host code, for C++ that
    only nvcc compiles (CUTLASS's host side) in a library that links neither
    the CUDA runtime nor libstdc++.

    References to the runtime are renamed to `rename_prefix` + name (the
    library defines those); the build fails if any runtime or libstdc++
    symbol is left. Built in the exec configuration, once for every target
    configuration (as cuda_fatbin): it is not instrumented by --config=asan.
    `srcs` (C, compiled as usual with c_copts) go into the same library: the
    definitions of the renamed symbols belong there, so the linker finds
    them while it resolves the object.
    """
    _cuda_host_object_nvcc(name = name + "_nvcc", src = src, hdrs = hdrs, copts = copts, rename_prefix = rename_prefix)
    _exec_object(name = name + "_exec", src = ":" + name + "_nvcc", out = name + ".o")
    native.cc_library(
        name = name,
        srcs = [":" + name + "_exec"] + srcs,
        copts = c_copts,
        deps = deps,
        visibility = visibility,
        linkstatic = True,
    )
