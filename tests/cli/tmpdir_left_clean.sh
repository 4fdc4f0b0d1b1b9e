#!/usr/bin/env bash
# tmpdir_left_clean.sh DIR: the last test of a run (the tmpdir fixture's cleanup, testing.cmake).
# Every test ran with TMPDIR=DIR and had to remove what it wrote there, pass or fail: exit 0 if
# DIR is empty, else list what was left (which test's files they are: their names say) and exit 1.
set -u
dir=$1
[ -d "$dir" ] || { echo "tmpdir_left_clean: $dir does not exist (tmpdir_setup did not run?)" >&2; exit 1; }
left=$(cd "$dir" && ls -A)
if [ -n "$left" ]; then
  echo "tmpdir_left_clean: the tests left these in $dir (TMPDIR):" >&2
  (cd "$dir" && ls -lA) >&2
  exit 1
fi
echo "tmpdir_left_clean: $dir is empty"
