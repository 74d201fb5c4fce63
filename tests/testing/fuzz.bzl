"""fuzz_test: a libFuzzer test whose fuzzer is built once, as a Bazel action.

The script `<name>.sh` (which sources tests/testing/fuzz_lib.sh) is both the recipe and the test:
a genrule runs it with FUZZ_BUILD_ONLY set, so that its `fuzz_build` compiles the fuzzer with
clang (the Bazel toolchain is gcc) into the rule's output and stops; the sh_test runs the same
script with that binary as its argument, and `fuzz_build` takes it instead of compiling. The
compile is then an action like any other: cached in the disk cache, not repeated by every test
run, and not run again under the sanitizer configurations (the fuzzer carries its own ASan and
UBSan). tools/fuzz still runs the scripts outside Bazel, where they compile for themselves.
"""

def fuzz_test(name, srcs, size = "medium"):
    """`name`: "<target>_fuzz_test"; `srcs`: the sources and headers the script compiles."""
    target = name[:-len("_fuzz_test")]
    script = name + ".sh"
    lib = "//tests/testing:fuzz_lib.sh"
    native.genrule(
        name = target + "_fuzzer_bin",
        srcs = [script, lib] + srcs,
        outs = [target + "_fuzzer_bin"],
        # The script finds fuzz_lib.sh and the sources under $TEST_SRCDIR/$TEST_WORKSPACE, as
        # in a test's runfiles: here that is the execution root.
        cmd = ("work=$$(mktemp -d) && " +
               "TEST_SRCDIR=$$(dirname $$PWD) TEST_WORKSPACE=$$(basename $$PWD) " +
               "TEST_TMPDIR=$$work FUZZ_BUILD_ONLY=$$PWD/$@ /bin/bash $(location %s) " % script +
               "&& rm -rf $$work"),
        testonly = True,
    )
    native.sh_test(
        name = name,
        size = size,
        srcs = [script],
        args = ["$(rootpath :%s_fuzzer_bin)" % target],
        # The sources too: a script may prepare more than the compile (protoc for the checkpoint
        # fuzzer's manifest classes) before its fuzz_build.
        data = [
            ":%s_fuzzer_bin" % target,
            "//tests/fuzz_corpus:" + target,
            lib,
        ] + srcs,
        # The sanitizer stage of tools/test leaves these out: the fuzzer is instrumented already.
        tags = ["fuzz"],
    )
