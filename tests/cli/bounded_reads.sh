#!/usr/bin/env bash
# bounded_reads.sh KVSIM CASE [ARG...]: builds one over-long input in the current directory (a
# fresh one: run it under expect.sh, which removes it) and runs kvsim on it, for expect.sh to
# check the exit status and the message. Every line read is at most 64 MiB and every JSON
# document at most 64 MiB (docs/replay.md, "Limits"); a profile's CSV line at most 4096 bytes.
#
#   trace-line-3      a Mooncake trace whose 3rd row is valid but padded to 65 MiB
#   endless-stdin     a line that never ends, on standard input
#   endless-json      an --engine-args document that never ends, through a pipe
#   large-json        an --engine-args file of 65 MiB (a valid document padded with spaces)
#   run-line DIR ROOT the recorded run DIR (copied) with a 65 MiB last line in requests.jsonl,
#                     validated with the profiles in ROOT
#   profile-line DIR  the profile root DIR (copied) with a 4,600-byte line in dense.csv, made of
#                     511-byte pieces that are each a valid row
#   endless-yaml DIR  the profile root DIR (copied) whose meta.yaml is a YAML scalar that
#                     never ends, through a pipe
#   endless-trace-max an endless stream of valid Mooncake rows, --max-requests 5
set -u
kvsim=$1 case=$2
mib65=$((65 << 20))
spaces() { head -c "$1" /dev/zero | tr '\0' ' '; }
row() {
  printf '{"timestamp": %d, "input_length": 16, "output_length": 2, "hash_ids": [%d]}' "$1" "$1"
}
case $case in
trace-line-3)
  { row 0; echo; row 1; echo; row 2; spaces $mib65; echo; row 3; echo; } > t.jsonl
  exec "$kvsim" replay --quiet t.jsonl
  ;;
endless-stdin)
  yes | tr -d '\n' | "$kvsim" replay --quiet --format mooncake -
  ;;
endless-json)
  { printf '{"max_num_seqs": 8, "served_model_name": "'; yes | tr -d '\n'; } |
    "$kvsim" replay --quiet --engine-args /dev/stdin
  ;;
large-json)
  { printf '{"max_num_seqs": 8}'; spaces $mib65; } > big.json
  exec "$kvsim" replay --quiet --synthetic-requests 10 --engine-args big.json
  ;;
run-line)
  cp -r "$3" run
  truncate -s +$mib65 run/requests.jsonl # a last line of NUL bytes, without a line end
  exec "$kvsim" validate run --profiles "${4:?the profile root}"
  ;;
profile-line)
  cp -r "$3" root
  dense=root/TESTHW/test/tiny/bf16/tp1/dense.csv
  python3 - "$dense" <<'PY'
import sys
# Before the bounded reader, fgets split this line into 512-byte pieces, each read as a row.
pieces = []
for k in range(9):
    head = f"embedding,{200 + 100 * k},"
    pieces.append(head + "2".rjust(511 - len(head), "0"))
pieces.append("embedding,1200,2\n")
with open(sys.argv[1], "a") as f:
    f.write("".join(pieces))
PY
  exec "$kvsim" replay --quiet --synthetic-requests 10 --profiles root --hardware TESTHW \
    --model test/tiny
  ;;
endless-yaml)
  cp -r "$3" root
  meta=root/TESTHW/test/tiny/bf16/meta.yaml
  rm "$meta"
  ln -s /dev/stdin "$meta"
  # one scalar that never ends (a list of ten million items would cost libyaml seconds per
  # million nodes before the limit, a minute under ASan)
  { printf 'layers: '; yes | tr -d '\n'; } |
    "$kvsim" replay --quiet --synthetic-requests 10 --profiles root --hardware TESTHW \
      --model test/tiny
  ;;
endless-trace-max)
  # The rows read, the rest of the stream is left unread (a hash of it would never end).
  yes "$(row 1)" | "$kvsim" replay --quiet --format mooncake --max-requests 5 \
    --report /dev/stdout -
  ;;
*)
  echo "bounded_reads.sh: unknown case '$case'" >&2
  exit 64
  ;;
esac
