#!/usr/bin/env python3
"""A KV-aware router over N kvsim engines, fed by their KV events.

Each engine publishes the blocks entering and leaving its prefix cache (config "kv-events");
the router keeps one index of cached block hashes per engine from those events, and sends each
request to the engine where (prompt blocks not yet cached) + (blocks in use) is lowest: the
cost of vLLM's KV-aware routers. Requests come in prefix groups (a shared system prompt and a
question of their own), so the router learns to keep a group on the engine that holds its
prefix, and later requests of a group find their prefix cached.

    PYTHONPATH=<prefix>/lib/python3/dist-packages python3 route.py [ENGINES] [REQUESTS]
"""

import random
import sys

import kvsim

BLOCK = 16
MS = 1_000_000  # ns


class KvIndex:
    """The blocks one engine holds in its prefix cache, as its KV events tell."""

    def __init__(self):
        self.blocks = set()

    def apply(self, events):
        for ev in events:
            if ev["kind"] == "stored":
                self.blocks.update(ev["hashes"])
            elif ev["kind"] == "removed":
                self.blocks.difference_update(ev["hashes"])
            elif ev["kind"] == "cleared":
                self.blocks.clear()

    def prefix_blocks(self, hashes):
        """How many leading blocks of a prompt are cached (hashes chain over the prompt)."""
        n = 0
        for h in hashes:
            if h not in self.blocks:
                break
            n += 1
        return n


def workload(n, groups=4, seed=7):
    rng = random.Random(seed)
    prompts = [[rng.randrange(1, 50000) for _ in range(4 * BLOCK)] for _ in range(groups)]
    t = 0
    for i in range(n):
        t += rng.randrange(10, 40) * MS
        question = [rng.randrange(1, 50000) for _ in range(rng.randrange(8, 3 * BLOCK))]
        yield {"id": i, "arrival_ns": t, "tokens": prompts[rng.randrange(groups)] + question,
               "max_tokens": rng.randrange(4, 24)}


def main(argv):
    num_engines = int(argv[1]) if len(argv) > 1 else 3
    num_requests = int(argv[2]) if len(argv) > 2 else 24
    config = kvsim.Config({"kv-events": True, "block-size": BLOCK, "num-gpu-blocks": 512})
    engines = [kvsim.Engine(config) for _ in range(num_engines)]
    config.close()
    indexes = [KvIndex() for _ in engines]
    placement = {}
    requests = list(workload(num_requests))
    for req in requests:
        # Bring every engine to the arrival, and the indexes up to date with their events.
        for e, index in zip(engines, indexes):
            e.run_until(req["arrival_ns"])
            index.apply(e.kv_events())
        hashes = engines[0].prompt_hashes(**req)  # the same configuration: the same hashes

        def cost(i):
            uncached = len(hashes) - indexes[i].prefix_blocks(hashes)
            return (uncached + engines[i].load()["active_blocks"], i)

        best = min(range(num_engines), key=cost)
        engines[best].add(**req)
        placement[req["id"]] = best

    for e in engines:
        e.run()
    ttfts = []
    completed = cached = 0
    for req in requests:
        i = placement[req["id"]]
        r = engines[i].record(req["id"])
        if r["finish_reason"] in ("stop", "length"):
            completed += 1
        cached += r["cached_tokens"] > 0
        ttft_ms = (r["first_token_ns"] - r["arrival_ns"]) / MS
        ttfts.append(ttft_ms)
        print("engine %d  request %3d  ttft %8.3f ms  cached %3d tokens  %s" %
              (i, req["id"], ttft_ms, r["cached_tokens"], r["finish_reason"]))
    print("routed %d requests over %d engines: %d completed, %d with a cached prefix, "
          "mean TTFT %.3f ms" % (len(requests), num_engines, completed, cached,
                                 sum(ttfts) / len(ttfts)))
    for e in engines:
        e.close()
    return 0 if completed == len(requests) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
