#!/usr/bin/env bash
# run_keys.sh KVSIM COMMAND RUN FILE SED [FILE SED ...] -- [ARG...]: copies the recorded run RUN
# into ./run (the test's own directory, expect.sh's), edits each run/FILE with its sed expression
# SED (which must change it), and runs `KVSIM COMMAND run ARG...`. A refusal caused by an edited
# key names run/FILE and the key, not the kvsim option the value stands for.
set -eu
kvsim=$1 cmd=$2 src=$3
shift 3
cp -r "$src" run
while [ "${1:---}" != -- ]; do
  file=$1 edit=$2
  shift 2
  sed -e "$edit" "run/$file" > run/.edited
  if cmp -s "run/$file" run/.edited; then
    echo "run_keys.sh: '$edit' changes nothing in $src/$file" >&2
    exit 2
  fi
  mv run/.edited "run/$file"
done
shift
exec "$kvsim" "$cmd" run "$@"
