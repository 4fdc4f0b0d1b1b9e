#!/usr/bin/env bash
# expect.sh CODE REGEX -- COMMAND [ARG...]
# Runs COMMAND with its standard output and error merged, prints what it wrote, and exits 0 if
# and only if COMMAND exited with exactly CODE and its output matches REGEX; otherwise says why
# and exits 1 (77, a skip, when COMMAND exits 77 and CODE is not 77). REGEX is a POSIX extended
# regular expression matched against the whole output (bash's =~): '.' and '[^x]' also match
# newlines, '^' and '$' anchor the output's start and end.
set -u
if [ $# -lt 4 ] || [ "$3" != "--" ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: expect.sh CODE REGEX -- COMMAND [ARG...]" >&2
  exit 2
fi
want=$1 re=$2
shift 3
# COMMAND runs in a fresh directory of its own (removed at exit, pass or fail): a relative
# output path in its arguments lands there.
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir expect
cd "$work"
out_file=$work/.expect-output
"$@" >"$out_file" 2>&1
rc=$?
out=$(cat "$out_file"; echo .) # the dot keeps trailing newlines
out=${out%.}
printf '%s' "$out"
[ -z "$out" ] || [ "${out: -1}" = $'\n' ] || echo
# A command that skips (exit 77: a shared trace, MPI or a browser missing) skips the test too:
# ctest reports it as skipped where the test sets SKIP_RETURN_CODE 77, as failed elsewhere.
if [ "$rc" -eq 77 ] && [ "$want" -ne 77 ]; then
  echo "expect.sh: '$*' skipped (exit 77)" >&2
  exit 77
fi
ok=1
if [ "$rc" -ne "$want" ]; then
  echo "expect.sh: '$*' exited $rc, expected $want" >&2
  ok=0
fi
if ! [[ $out =~ $re ]]; then
  echo "expect.sh: the output of '$*' does not match '$re'" >&2
  ok=0
fi
[ $ok -eq 1 ] || exit 1
