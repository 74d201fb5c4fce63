"""cuda_library: compiles .cu files with nvcc for sm_90 (plus compute_90 PTX).

Each .cu becomes one object through an nvcc action; the objects join a cc_library with alwayslink
so kernels and their host stubs link. The nvcc action sees the headers, include paths and defines
of `deps` (from their CcInfo), so a .cu includes our headers exactly as a .cc does. Without CUDA
(see cuda_configure.bzl) the library is empty and `cuda_enabled()` lets callers choose a CPU-only
source instead.
"""

load("@local_cuda//:defs.bzl", "CUDA_ENABLED", "CUDA_ROOT")

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-Xcompiler",
    "-fPIC",
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_90,code=compute_90",
]

def cuda_enabled():
    return CUDA_ENABLED

def _nvcc_object_impl(ctx):
    contexts = [dep[CcInfo].compilation_context for dep in ctx.attr.deps]
    args = ctx.actions.args()
    args.add_all(NVCC_FLAGS)

    # "." for workspace-relative includes of the library's own headers; nvcc has no -iquote, so
    # the deps' quote includes become -I as well.
    args.add("-I.")
    args.add_all(depset(transitive = [c.quote_includes for c in contexts]), format_each = "-I%s")
    args.add_all(depset(transitive = [c.includes for c in contexts]), format_each = "-I%s")
    args.add_all(depset(transitive = [c.system_includes for c in contexts]), before_each = "-isystem")
    args.add_all(depset(transitive = [c.defines for c in contexts]), format_each = "-D%s")
    args.add("-c", ctx.file.src)
    args.add("-o", ctx.outputs.out)
    ctx.actions.run(
        executable = CUDA_ROOT + "/bin/nvcc",
        arguments = [args],
        inputs = depset(
            [ctx.file.src] + ctx.files.hdrs + ctx.files._nvcc,
            transitive = [c.headers for c in contexts],
        ),
        outputs = [ctx.outputs.out],
        # nvcc finds the host compiler (gcc) on PATH.
        use_default_shell_env = True,
        mnemonic = "Nvcc",
        progress_message = "Compiling %s with nvcc" % ctx.file.src.short_path,
    )

_nvcc_object = rule(
    implementation = _nvcc_object_impl,
    attrs = {
        "src": attr.label(allow_single_file = [".cu"], mandatory = True),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "out": attr.output(mandatory = True),
        "_nvcc": attr.label(default = "@local_cuda//:nvcc", allow_files = True),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc; empty when CUDA is absent."""
    objs = []
    if CUDA_ENABLED:
        for src in srcs:
            obj = "_%s_%s.o" % (name, src.replace("/", "_").replace(".cu", ""))
            _nvcc_object(
                name = obj + "_nvcc",
                src = src,
                hdrs = hdrs,
                deps = deps + ["@local_cuda//:cudart"],
                out = obj,
            )
            objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        alwayslink = True,
        **kwargs
    )
