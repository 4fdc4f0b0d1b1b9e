#!/usr/bin/env bash
# Issue 42: `kvsim replay --help` is generated from the option table (api/config.c). Every option
# it lists is accepted by the parser (getopt knows it: the error, if any, is about its value or
# another option, never "unknown option"), --help lists each option once, and it lists exactly
# the command-line rows of the table (the unit test test_options checks the table side).
set -euo pipefail
kvsim=$1
fail() { echo "replay_help_table: $*" >&2; exit 1; }
help=$("$kvsim" replay --help)
names=$(grep -oE '^  --[a-z0-9-]+' <<<"$help" | sed 's/^  --//')
[ "$(wc -l <<<"$names")" -ge 80 ] || fail "--help lists too few options: $(wc -l <<<"$names")"
dups=$(sort <<<"$names" | uniq -d)
[ -z "$dups" ] || fail "--help lists twice: $dups"
for n in $names; do
  [ "$n" = help ] && continue
  # A value that no option takes, then an option refused at parse time: nothing runs.
  if grep -qE "^  --$n( |$)" <<<"$help" && ! grep -qE "^  --$n  " <<<"$help" &&
     grep -qE "^  --$n [^ ]" <<<"$help"; then
    out=$("$kvsim" replay "--$n=@not-a-value@" --max-requests=0 2>&1 || true)
  else
    out=$("$kvsim" replay "--$n" --max-requests=0 2>&1 || true)
  fi
  if grep -q "unknown option" <<<"$out"; then fail "--$n is in --help but the parser refuses it: $out"; fi
done
# And an option the table does not have is refused.
out=$("$kvsim" replay --no-such-option 2>&1 || true)
grep -q "unknown option '--no-such-option'" <<<"$out" || fail "an unknown option was accepted: $out"
echo "replay_help_table: $(wc -l <<<"$names") options, each accepted"
