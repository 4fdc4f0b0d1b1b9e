#!/usr/bin/env bash
# `kvsim soak --first-seed S --seeds N` runs seeds S..S+N-1: with --keep it writes each one's
# scenario, and the names are those seeds'. Usage: first_seed_range.sh KVSIM
set -u
kvsim=$1
dir=$(mktemp -d)
"$kvsim" soak --first-seed 100 --seeds 3 --keep --quiet --out "$dir" && ls "$dir"
rc=$?
rm -rf "$dir"
exit $rc
