#!/usr/bin/env python3
"""threads_cap.py KVSIM (issue #39): `kvsim replay --threads 8` on 8 engines runs on
min(8, the CPUs this process may use) threads (the report's wall.threads), and on 8 with
KVSIM_REPLAY_OVERSUBSCRIBE=1; both reports are otherwise identical."""
import json
import os
import subprocess
import sys
import tempfile

kvsim = sys.argv[-1]
cpus = len(os.sched_getaffinity(0))
ran = {}
with tempfile.TemporaryDirectory(prefix="kvsim-threads-cap.") as tmp:
    for over in ("0", "1"):
        env = dict(os.environ, KVSIM_REPLAY_OVERSUBSCRIBE=over)
        path = os.path.join(tmp, over + ".json")
        subprocess.run([kvsim, "replay", "--synthetic-requests", "60", "--engines", "8",
                        "--threads", "8", "--quiet", "--report", path], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        with open(path) as f:
            ran[over] = json.load(f)
threads = {k: v.pop("wall")["threads"] for k, v in ran.items()}
for v in ran.values():
    v["run"].pop("config", None)
if threads["0"] != min(8, cpus) or threads["1"] != 8:
    print(f"threads: 8 asked, {cpus} CPUs: {threads['0']} ran, {threads['1']} oversubscribed")
    sys.exit(1)
if ran["0"] != ran["1"]:
    print("threads: the capped and the oversubscribed reports differ")
    sys.exit(1)
print(f"threads: 8 asked, {cpus} CPUs, {threads['0']} ran (the CPUs or 8); 8 ran with "
      f"KVSIM_REPLAY_OVERSUBSCRIBE=1")
