#!/usr/bin/env bash
# proof_49675.sh KVSIM
# The #49675 proof on the CI seed set, with async scheduling and the deferred-free fence forced
# on for every seed:
#  1. guard off: the soak fails, every failure is a futile (deferred-free) preemption, and the
#     failing seed's scenario replays (same evidence) and minimizes (same kind);
#  2. guard off, progress rule off: invariants and liveness still hold, but the soak counts
#     futile preemptions and cascades of at least two futile victims in one schedule;
#  3. guard on: the same seeds pass with zero futile preemptions.
set -u
kvsim=$1
. "$(dirname "$0")/../cli/workdir.sh"
kvsim_test_workdir proof-49675
seeds=200
fail() { echo "proof_49675: $*" >&2; exit 1; }
fence=(--seeds $seeds --set async_scheduling=true --set defer_block_free=true)

# 1. guard off, progress rule on
out=$("$kvsim" soak "${fence[@]}" --set preempted_victim_guard=false --out "$work/off"); rc=$?
echo "$out" | grep -v '^soak: seed' | tail -n 3
[ $rc -eq 1 ] || fail "guard off: soak exited $rc, expected 1"
nfail=$(grep -c '^FAIL seed' <<<"$out")
nfutile=$(grep -c '^FAIL seed [0-9]* \[futile_preemption\]' <<<"$out")
[ "$nfail" -ge 1 ] || fail "guard off: no seed showed the cascade"
[ "$nfail" -eq "$nfutile" ] || fail "guard off: $((nfail - nfutile)) failures are not futile preemptions"
first=$(grep -m1 '^FAIL seed' <<<"$out")
seed=$(sed -n 's/^FAIL seed \([0-9]*\) .*/\1/p' <<<"$first")
evidence=${first#*]: }
trace="$work/off/soak-seed$seed.json"
[ -f "$trace" ] || fail "guard off: $trace was not written"
replay=$("$kvsim" conform "$trace"); rc=$?
[ $rc -eq 1 ] || fail "kvsim conform $trace exited $rc, expected 1"
grep -qF "soak seed $seed: $evidence" <<<"$replay" || fail "the replay's evidence differs: $replay"
"$kvsim" minimize "$trace" -o "$work/min.json" || fail "kvsim minimize $trace failed"
"$kvsim" conform "$work/min.json" | grep -q '^FAIL .*futile preemption' ||
  fail "the minimized trace fails differently"
echo "proof_49675: guard off: $nfail of $seeds seeds fail with futile preemptions; seed $seed replays and minimizes"

# 2. guard off, progress rule off: the cascade, counted
out=$("$kvsim" soak "${fence[@]}" --set preempted_victim_guard=false \
      --set max_futile_preemptions=off --out "$work/count"); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "guard off, rule off: soak exited $rc (an invariant or liveness failure)"
futile=$(sed -n 's/.* \([0-9]*\) futile, longest cascade \([0-9]*\),.*/\1/p' <<<"$out")
cascade=$(sed -n 's/.* \([0-9]*\) futile, longest cascade \([0-9]*\),.*/\2/p' <<<"$out")
[ -n "$futile" ] && [ "$futile" -gt 0 ] || fail "guard off: no futile preemption counted"
[ "$cascade" -ge 2 ] || fail "guard off: no cascade (longest $cascade)"

# 3. guard on: bounded (none)
out=$("$kvsim" soak "${fence[@]}" --out "$work/on"); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "guard on: soak exited $rc"
grep -q ' 0 futile, longest cascade 0,' <<<"$out" || fail "guard on: futile preemptions remain"
echo "proof_49675: ok: guard off $futile futile preemptions (cascades up to $cascade); guard on 0"
