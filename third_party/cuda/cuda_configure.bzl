"""Detects CUDA, cuDNN and NCCL at configure time and exposes them as @local_cuda.

With nvcc present (in $CUDA_PATH, default /usr/local/cuda) and PADDLE_CUDA not "0", @local_cuda
holds the headers and link flags and `CUDA_ENABLED` is True. Otherwise every target exists but is
empty and CUDA_ENABLED is False, so the CPU build never needs the toolkit.
"""

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    wanted = ctx.os.environ.get("PADDLE_CUDA", "auto") != "0"
    enabled = wanted and ctx.path(root + "/bin/nvcc").exists
    if enabled:
        ctx.symlink(root + "/include", "include")
        ctx.symlink(root + "/bin", "bin")
        lib = root + "/lib"
        if not ctx.path(lib + "/libcudart.so").exists:
            lib = root + "/lib64"
        ctx.template("BUILD.bazel", ctx.attr._enabled_tpl, {"%{LIB}": lib})
    else:
        ctx.template("BUILD.bazel", ctx.attr._disabled_tpl, {})
    ctx.file("defs.bzl", "CUDA_ENABLED = %s\nCUDA_ROOT = %r\n" % (enabled, root))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "PADDLE_CUDA"],
    local = True,
    attrs = {
        "_enabled_tpl": attr.label(default = "//third_party/cuda:BUILD.enabled.tpl"),
        "_disabled_tpl": attr.label(default = "//third_party/cuda:BUILD.disabled.tpl"),
    },
)
