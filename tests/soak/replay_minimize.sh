#!/usr/bin/env bash
# replay_minimize.sh KVSIM SCENARIO PATTERN
# A failing scenario replays and minimizes end to end: `kvsim conform` fails it with evidence
# matching PATTERN, `kvsim minimize` writes a scenario with fewer steps, and `kvsim conform` fails
# that one with evidence matching PATTERN too (the same kind of failure).
set -u
kvsim=$1 scenario=$2 pattern=$3
. "$(dirname "$0")/../cli/workdir.sh"
kvsim_test_workdir replay-minimize
fail() { echo "replay_minimize: $*" >&2; exit 1; }
min="$work/$(basename "${scenario%.json}").min.json"

out=$("$kvsim" conform "$scenario"); rc=$?
echo "$out"
[ $rc -eq 1 ] || fail "kvsim conform $scenario exited $rc, expected 1"
grep -q "^FAIL .*$pattern" <<<"$out" || fail "its FAIL line does not match '$pattern'"

out=$("$kvsim" minimize "$scenario" -o "$min"); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "kvsim minimize exited $rc"
read -r before after < <(sed -n 's/.*steps \([0-9]*\) -> \([0-9]*\) .*/\1 \2/p' <<<"$out")
[ -n "${after:-}" ] || fail "kvsim minimize did not report its step counts"
[ "$after" -lt "$before" ] || fail "minimize kept $after of $before steps"
# A dead end keeps its shape while it shrinks (verify.h): minimize says which.
if grep -q "dead end" <<<"$pattern"; then
  grep -q '^minimize: dead end of shape "policy=.*", as the input'"'"'s$' <<<"$out" ||
    fail "minimize did not report the dead end's shape"
fi
n=$(grep -c '"op":' "$min")
[ "$n" -eq "$after" ] || fail "$min has $n steps, minimize reported $after"

out=$("$kvsim" conform "$min"); rc=$?
echo "$out"
[ $rc -eq 1 ] || fail "kvsim conform $min exited $rc, expected 1"
grep -q "^FAIL .*$pattern" <<<"$out" || fail "the minimized scenario fails differently"
echo "replay_minimize: ok ($before -> $after steps)"
