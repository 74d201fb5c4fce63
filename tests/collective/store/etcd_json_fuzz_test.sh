#!/bin/bash
# Fuzzes the reader of etcd's gateway replies (etcd_json_fuzzer.cc) with libFuzzer, ASan and UBSan
# for FUZZ_SECONDS (default 20); see tests/testing/fuzz_lib.sh.
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/testing/fuzz_lib.sh"

# Seeds: replies of the calls EtcdStore makes (range, txn, lease grant, watch, an error), then
# escapes, deep nesting and a truncated reply.
seed range   '{"header":{"cluster_id":"14841639068965178418","revision":"7"},"kvs":[{"key":"L3BhZGRsZS9qL2s=","create_revision":"5","mod_revision":"7","version":"2","value":"dg==","lease":"7587862"}],"count":"1"}'
seed txn     '{"header":{"revision":"9"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"9"}}}]}'
seed lease   '{"header":{"revision":"3"},"ID":"7587862072592478212","TTL":"30"}'
seed watch   '{"result":{"header":{"revision":"4"},"created":true}}\n'
seed error   '{"error":"etcdserver: requested lease not found","code":5,"message":"etcdserver: requested lease not found"}'
seed escapes '["a\\"b\\\\c\\n\\t\\u00e9", -1.5e3, false, null, {}]'
seed deep    '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]'
seed cut     '{"kvs":[{"key":"a2V5","value":"dm'

fuzz_build tests/collective/store/etcd_json_fuzzer.cc paddle/collective/store/etcd_store.cc \
  paddle/collective/store/store.cc paddle/core/deadline.cc paddle/core/env.cc paddle/core/settings.cc \
  paddle/core/logging.cc paddle/core/status.cc -- -lcurl
FUZZ_MAX_LEN=4096 fuzz_run "etcd JSON fuzzer"
