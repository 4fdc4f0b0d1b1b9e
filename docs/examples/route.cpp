// route.cpp - route.c's KV-aware router in C++: engines behind std::unique_ptr, the router's view
// of each prefix cache (from the engines' KV events) in a std::unordered_map, errors as
// exceptions. The same workload and policy as route.c: the same lines per request.
//
//   c++ -std=c++17 route.cpp $(pkg-config --cflags --libs kvsim) -o route && ./route
#include <kvsim/kvsim.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace
{

constexpr int num_engines = 4;
constexpr unsigned num_requests = 200, num_groups = 20;
constexpr uint32_t hash_block = 16; // tokens per hash id, and the engines' block size
constexpr uint64_t max_blocks = 64; // hash ids of the longest prompt

struct ConfigFree {
    void operator()(kvsim_config_t *c) const { kvsim_config_free(c); }
};
struct EngineFree {
    void operator()(kvsim_engine_t *e) const { kvsim_engine_free(e); }
};
using Config = std::unique_ptr<kvsim_config_t, ConfigFree>;
using EnginePtr = std::unique_ptr<kvsim_engine_t, EngineFree>;

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Throws when rc is a negative errno, with the engine's message.
long check(long rc, const char *what, const kvsim_engine_t *e)
{
    if (rc < 0)
        throw Error(std::string(what) + ": " + kvsim_strerror(static_cast<int>(rc)) + " (" +
                    kvsim_engine_errmsg(e) + ")");
    return rc;
}

// The workload of route.c: the same generator, the same requests.
struct Request {
    kvsim_request_t req;
    std::vector<uint64_t> hash_ids;
    unsigned group;
};

struct Rng { // xorshift64*
    uint64_t s = 0x6b7673696dULL;
    uint32_t below(uint32_t n)
    {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return static_cast<uint32_t>((s * 0x2545F4914F6CDD1DULL) >> 33) % n;
    }
};

std::vector<Request> make_workload()
{
    Rng rng;
    std::vector<uint32_t> prefix_blocks(num_groups);
    for (auto &p : prefix_blocks)
        p = 8 + rng.below(17);
    std::vector<Request> work(num_requests);
    int64_t t = 0;
    for (unsigned i = 0; i < num_requests; i++) {
        Request &r = work[i];
        r.group = rng.below(num_groups);
        uint32_t own = 1 + rng.below(8);
        for (uint32_t k = 0; k < prefix_blocks[r.group]; k++)
            r.hash_ids.push_back(uint64_t{r.group} * max_blocks + k);
        for (uint32_t k = 0; k < own; k++)
            r.hash_ids.push_back(uint64_t{num_groups + i} * max_blocks + k);
        t += (5 + rng.below(20)) * int64_t{1000000};
        r.req = KVSIM_REQUEST_INIT;
        r.req.id = i;
        r.req.arrival_ns = t;
        r.req.hash_ids = r.hash_ids.data();
        r.req.num_hash_ids = static_cast<uint32_t>(r.hash_ids.size());
        r.req.hash_block_size = hash_block;
        r.req.input_len = r.req.num_hash_ids * hash_block - rng.below(hash_block);
        r.req.max_tokens = 16 + rng.below(64);
        if (rng.below(3) == 0)
            r.req.stop_after = 1 + rng.below(r.req.max_tokens);
    }
    return work;
}

struct Result {
    int engine = -1;
    uint32_t expected_cached = 0;
    int64_t first_token_ns = -1, finish_ns = -1;
    int32_t finish_reason = -1;
    uint32_t output_tokens = 0;
};

struct Engine {
    EnginePtr e;
    std::unordered_map<uint64_t, uint32_t> cached; // block hash -> cached blocks carrying it
    bool failed = false;
    unsigned routed = 0;

    static void on_kv_event(void *ctx, const kvsim_kv_event_t *ev) noexcept
    {
        auto *self = static_cast<Engine *>(ctx);
        try { // no exception may cross the library's C frames
            if (ev->kind == KVSIM_KV_CLEARED)
                self->cached.clear();
            for (uint32_t i = 0; i < ev->num_hashes; i++) {
                if (ev->kind == KVSIM_KV_STORED) {
                    self->cached[ev->hashes[i]]++;
                } else if (ev->kind == KVSIM_KV_REMOVED) {
                    auto it = self->cached.find(ev->hashes[i]);
                    if (it != self->cached.end() && --it->second == 0)
                        self->cached.erase(it);
                }
            }
        } catch (...) {
            self->failed = true;
        }
    }

    // Runs the engine to t and reads its events and KV events.
    void advance(int idx, int64_t t, std::vector<Result> &results)
    {
        check(kvsim_engine_run_until(e.get(), t), "kvsim_engine_run_until", e.get());
        std::vector<kvsim_event_t> buf(256);
        size_t n;
        while ((n = kvsim_engine_events(e.get(), buf.data(), buf.size())) > 0) {
            for (size_t i = 0; i < n; i++) {
                const kvsim_event_t &ev = buf[i];
                if (ev.id >= results.size() || results[ev.id].engine != idx)
                    throw Error("an event of request " + std::to_string(ev.id) + ", which engine " +
                                std::to_string(idx) + " was not given");
                Result &r = results[ev.id];
                if (ev.kind == KVSIM_EVENT_TOKEN && ev.a == 0 && r.first_token_ns < 0)
                    r.first_token_ns = ev.t_ns;
                if (ev.kind == KVSIM_EVENT_FINISHED) {
                    r.finish_ns = ev.t_ns;
                    r.finish_reason = static_cast<int32_t>(ev.a);
                    r.output_tokens = ev.b;
                }
            }
        }
        check(kvsim_engine_kv_events(e.get(), on_kv_event, this), "kvsim_engine_kv_events",
              e.get());
        if (failed)
            throw std::bad_alloc();
    }

    kvsim_load_t load() const
    {
        kvsim_load_t l = KVSIM_LOAD_INIT;
        check(kvsim_engine_load(e.get(), &l), "kvsim_engine_load", e.get());
        return l;
    }
};

void run()
{
    if ((kvsim_version_hex() >> 16) != KVSIM_VERSION_MAJOR)
        throw Error(std::string("built with another major version than ") + kvsim_version());
    kvsim_config_t *raw = nullptr;
    if (kvsim_config_new(&raw) != 0)
        throw std::bad_alloc();
    Config cfg(raw);
    // The options of route.c, as one JSON object.
    if (int rc = kvsim_config_set_json(cfg.get(), R"({"block-size": 16, "num-gpu-blocks": 600,
                                                      "max-num-seqs": 16, "kv-events": true})"))
        throw Error(std::string("kvsim_config_set_json: ") + kvsim_strerror(rc) + " (" +
                    kvsim_config_error(cfg.get()) + ")");
    std::vector<Engine> engines(num_engines);
    for (Engine &en : engines) {
        kvsim_engine_t *e = nullptr;
        if (int rc = kvsim_engine_new(cfg.get(), &e))
            throw Error(std::string("kvsim_engine_new: ") + kvsim_strerror(rc) + " (" +
                        kvsim_config_error(cfg.get()) + ")");
        en.e.reset(e);
    }
    cfg.reset();

    std::vector<Request> work = make_workload();
    std::vector<Result> results(work.size());
    auto advance_all = [&](int64_t t) {
        for (int i = 0; i < num_engines; i++)
            engines[i].advance(i, t, results);
    };
    std::vector<uint64_t> hashes;
    for (const Request &r : work) {
        advance_all(r.req.arrival_ns);
        // The longest cached prefix, ties to the lowest KV usage, then the fewest queued prompt
        // tokens, then the fewest requests, then the lowest index (route.c's pick_engine).
        hashes.resize(r.hash_ids.size());
        long n = check(
            kvsim_engine_prompt_hashes(engines[0].e.get(), &r.req, hashes.data(), hashes.size()),
            "kvsim_engine_prompt_hashes", engines[0].e.get());
        hashes.resize(std::min(hashes.size(), static_cast<size_t>(n)));
        int best = 0;
        std::tuple<long, double, uint64_t, uint32_t> best_key;
        for (int i = 0; i < num_engines; i++) {
            const auto &cached = engines[i].cached;
            auto miss = std::find_if(hashes.begin(), hashes.end(),
                                     [&](uint64_t h) { return cached.count(h) == 0; });
            kvsim_load_t l = engines[i].load();
            auto key = std::make_tuple(-static_cast<long>(miss - hashes.begin()), l.kv_usage,
                                       l.queued_prompt_tokens,
                                       l.num_running + l.num_waiting + l.num_pending);
            if (i == 0 || key < best_key) {
                best = i;
                best_key = key;
            }
        }
        Engine &en = engines[best];
        check(kvsim_engine_add(en.e.get(), &r.req), "kvsim_engine_add", en.e.get());
        results[r.req.id].engine = best;
        results[r.req.id].expected_cached =
            static_cast<uint32_t>(-std::get<0>(best_key)) * hash_block;
        en.routed++;
    }
    for (int64_t last = -1;;) {
        int64_t t = INT64_MAX;
        for (const Engine &en : engines)
            t = std::min(t, kvsim_engine_next_time(en.e.get()));
        if (t == INT64_MAX)
            break;
        if (t <= last)
            throw Error("the engines' next event is not after the last one");
        advance_all(t);
        last = t;
    }

    std::vector<double> ttft;
    uint64_t prompt_tokens = 0, cached_tokens = 0;
    unsigned finished = 0;
    for (const Request &r : work) {
        const Result &res = results[r.req.id];
        kvsim_record_t rec = KVSIM_RECORD_INIT;
        const kvsim_engine_t *e = engines[res.engine].e.get();
        check(kvsim_engine_record(e, r.req.id, &rec), "kvsim_engine_record", e);
        if (rec.first_token_ns != res.first_token_ns || rec.finish_reason != res.finish_reason)
            throw Error("request " + std::to_string(r.req.id) +
                        ": its record disagrees with its events");
        prompt_tokens += rec.input_len;
        cached_tokens += rec.cached_tokens;
        finished += res.finish_reason >= 0;
        char t[32] = "-";
        if (res.first_token_ns >= 0) {
            ttft.push_back(static_cast<double>(res.first_token_ns - r.req.arrival_ns) / 1e6);
            std::snprintf(t, sizeof t, "%.2f ms", ttft.back());
        }
        std::printf("request %3" PRIu64 " group %2u engine %d prompt %4" PRIu32 " cached %4" PRIu32
                    " (routed for %4" PRIu32 ") ttft %10s outputs %3" PRIu32 " %s\n",
                    r.req.id, r.group, res.engine, rec.input_len, rec.cached_tokens,
                    res.expected_cached, t, res.output_tokens,
                    kvsim_finish_reason_name(res.finish_reason));
    }
    std::sort(ttft.begin(), ttft.end());
    double mean = ttft.empty() ? 0
                               : std::accumulate(ttft.begin(), ttft.end(), 0.0) /
                                     static_cast<double>(ttft.size());
    auto pct = [&](size_t p) { return ttft.empty() ? 0 : ttft[(ttft.size() - 1) * p / 100]; };
    std::string routed;
    for (const Engine &en : engines)
        routed += (routed.empty() ? "" : " ") + std::to_string(en.routed);
    std::printf("summary: %s, kv-aware routing, %u requests on %d engines (%s), %u finished, "
                "%" PRIu64 "/%" PRIu64 " prompt tokens cached, TTFT mean %.2f ms p50 %.2f ms "
                "p99 %.2f ms\n",
                kvsim_version(), num_requests, num_engines, routed.c_str(), finished, cached_tokens,
                prompt_tokens, mean, pct(50), pct(99));
    if (finished != num_requests)
        throw Error(std::to_string(num_requests - finished) + " requests did not finish");
}

} // namespace

int main()
{
    try {
        run();
        return 0;
    } catch (const std::exception &ex) {
        std::fprintf(stderr, "route: %s\n", ex.what());
        return 1;
    }
}
