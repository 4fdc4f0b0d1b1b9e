#!/usr/bin/env bash
# legacy_flag.sh KVSIM SCENARIO
# The transactional direction of a legacy_partial_alloc regression: SCENARIO fails (a dead end)
# with "legacy_partial_alloc": true; the same file with the flag false and every invariant check
# on ("scheduler_checks": false becomes "check_invariants": true) must pass. It runs with
# `kvsim conform --lenient`: the recorded model outputs belong to the legacy run's schedules, so
# they are replayed as a workload (each output gives a token to whatever its schedule sampled).
set -u
kvsim=$1 scenario=$2
. "$(dirname "$0")/../cli/workdir.sh"
kvsim_test_workdir legacy-flag
fail() { echo "legacy_flag: $*" >&2; exit 1; }
tx="$work/$(basename "${scenario%.json}").transactional.json"
grep -q '"legacy_partial_alloc": true' "$scenario" || fail "$scenario does not set legacy_partial_alloc"
grep -q '"scheduler_checks": false' "$scenario" || fail "$scenario does not turn scheduler_checks off"
sed -e 's/"legacy_partial_alloc": true/"legacy_partial_alloc": false/' \
    -e 's/"scheduler_checks": false/"check_invariants": true/' "$scenario" > "$tx" ||
  fail "cannot write $tx"
grep -q '"legacy_partial_alloc": false' "$tx" || fail "the flag was not rewritten"
out=$("$kvsim" conform --lenient "$tx"); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "with the transactional allocation $tx does not pass (exit $rc)"
grep -q '^PASS ' <<<"$out" || fail "no PASS line"
echo "legacy_flag: ok: with legacy_partial_alloc false the workload completes"
