#!/usr/bin/env bash
# The accuracy the training issue promises, from a fixed seed on the full Fashion-MNIST data:
# the MLP reaches test accuracy >= 0.88 and the CNN >= 0.91 within the epochs below. Minutes of
# training, so it is tagged manual and tools/test runs it in an optimized build
# (bazel test -c opt --config=opt //tests/examples:fashion_mnist_accuracy_test).
set -uo pipefail
binary=$1
failures=0

# check MODEL EPOCHS MIN_ACCURACY
check() {
  local model=$1 epochs=$2 want=$3 out
  out=$(timeout 1200 "$binary" --model="$model" --epochs="$epochs" --threads=2 --seed=1) || {
    echo "FAIL: $model training failed"
    failures=$((failures + 1))
    return
  }
  echo "$out"
  local got
  got=$(tail -n 1 <<<"$out" | sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p')
  if [[ -z "$got" ]] || ! awk -v g="$got" -v w="$want" 'BEGIN { exit !(g >= w) }'; then
    echo "FAIL: $model test accuracy '$got' after $epochs epochs, want >= $want"
    failures=$((failures + 1))
  else
    echo "PASS: $model test accuracy $got >= $want after $epochs epochs"
  fi
}
check mlp 6 0.88
check cnn 5 0.91
exit $((failures > 0))
