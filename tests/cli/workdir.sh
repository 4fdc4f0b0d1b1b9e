# workdir.sh - sourced by the test scripts: `kvsim_test_workdir NAME` sets $work to a fresh
# directory under $TMPDIR (ctest points it at the build tree's test-tmp/, which the
# tmpdir_left_clean test checks is empty at the end of a run) and removes it when the script
# exits, pass or fail. KVSIM_KEEP_TEST_FILES=1 keeps it and says where, to look at a failure.
# The script must not set its own EXIT trap.
kvsim_test_workdir() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-$1.XXXXXX") || {
    echo "$1: cannot create a temporary directory under ${TMPDIR:-/tmp}" >&2
    exit 2
  }
  if [ "${KVSIM_KEEP_TEST_FILES:-0}" = 1 ]; then
    trap 'echo "kept test files in $work" >&2' EXIT
  else
    trap 'rm -rf "$work"' EXIT
  fi
}
