#!/usr/bin/env bash
# tools/install-paddlerun with a stand-in bazel on PATH (it records its arguments; a test must not
# run the real one): paddlerun and an opt-built paddle_store_server land side by side, both run;
# a failed build installs nothing.
set -uo pipefail
install=$1
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

mkdir -p "$work/fake" "$work/prefix"
cat >"$work/fake/bazel" <<'SH'
#!/bin/sh
echo "$(pwd): $*" >>"$FAKE_LOG"
case "$1" in
  build)
    [ -z "${FAKE_FAIL:-}" ] || { echo "ERROR: no such target" >&2; exit 1; }
    mkdir -p "$FAKE_BIN/tools"
    printf '#!/bin/sh\necho fake store server "$@"\n' >"$FAKE_BIN/tools/paddle_store_server"
    chmod +x "$FAKE_BIN/tools/paddle_store_server" ;;
  info) echo "$FAKE_BIN" ;;
esac
SH
chmod +x "$work/fake/bazel"
export FAKE_LOG=$work/bazel.log FAKE_BIN=$work/bazel-bin PATH=$work/fake:$PATH

"$install" "$work/prefix/paddlerun" >"$work/install.out" 2>&1 || fail "install: $(cat "$work/install.out")"
workspace=$(cd "$(dirname "$install")/.." && pwd)
grep -qx "$workspace: build -c opt --config=opt //tools:paddle_store_server" "$work/bazel.log" ||
  fail "not built with -c opt --config=opt in the workspace: $(cat "$work/bazel.log")"
grep -qx "$workspace: info -c opt --config=opt bazel-bin" "$work/bazel.log" ||
  fail "bazel-bin not asked of the opt configuration: $(cat "$work/bazel.log")"
[[ -x $work/prefix/paddle_store_server ]] || fail "no executable paddle_store_server beside paddlerun"
"$work/prefix/paddle_store_server" --port=0 | grep -qx "fake store server --port=0" ||
  fail "the installed paddle_store_server is not the built one"
"$work/prefix/paddlerun" --help >"$work/help.out" 2>&1 || fail "paddlerun --help: $(cat "$work/help.out")"
grep -q -- "--nproc" "$work/help.out" || fail "paddlerun --help printed no --nproc"

# A failed build installs nothing and says so.
rm -rf "$work/prefix2" && mkdir -p "$work/prefix2"
FAKE_FAIL=1 "$install" "$work/prefix2/paddlerun" >"$work/fail.out" 2>&1 && fail "a failed build succeeded"
grep -q "building //tools:paddle_store_server failed" "$work/fail.out" || fail "$(cat "$work/fail.out")"
[[ -z $(ls "$work/prefix2") ]] || fail "a failed build installed $(ls "$work/prefix2")"

[[ $failures -eq 0 ]] || exit 1
echo PASS
