#!/usr/bin/env bash
# run_keys.sh KVSIM COMMAND RUN FILE SED [ARG...]: copies the recorded run RUN into ./run (the
# test's own directory, expect.sh's), edits run/FILE with the sed expression SED (it must change
# it), and runs `KVSIM COMMAND run ARG...`. A refusal caused by the edited key names run/FILE and
# the key, not the kvsim option the value stands for.
set -eu
kvsim=$1 cmd=$2 src=$3 file=$4 edit=$5
shift 5
cp -r "$src" run
sed -e "$edit" "$src/$file" > "run/$file"
if cmp -s "$src/$file" "run/$file"; then
  echo "run_keys.sh: '$edit' changes nothing in $src/$file" >&2
  exit 2
fi
exec "$kvsim" "$cmd" run "$@"
