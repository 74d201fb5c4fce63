#!/usr/bin/env bash
# The built //tools:k8s binary runs (`bazel run //tools:k8s -- --help`, docs/launch.md): a folder
# tools/k8s/ beside it once made its runfiles path a directory ("Cannot exec() ...__main__.py").
set -uo pipefail
k8s=$1
out=${TEST_TMPDIR:-$(mktemp -d)}/k8s.out
"$k8s" --help >"$out" 2>&1 || { echo "FAIL: $k8s --help: $(cat "$out")" >&2; exit 1; }
grep -q -- "--image" "$out" || { echo "FAIL: --help lists no --image: $(cat "$out")" >&2; exit 1; }
"$k8s" --name=fm --image=img:1 --nnodes=2 --nproc=2 -- //examples:fashion_mnist >"$out" 2>&1 ||
  { echo "FAIL: manifests: $(cat "$out")" >&2; exit 1; }
grep -q '"kind": "Job"' "$out" || { echo "FAIL: no Job in the manifests: $(cat "$out")" >&2; exit 1; }
echo PASS
