/*
 * model.c - the model and the GPU (engine.h): a Hugging Face config.json read into struct
 * kvsim_model_arch, and one GPU's KV capacity derived from it the way vLLM v1 (0.19) does.
 * Pure functions: any thread.
 *
 * vLLM's accounting (vllm/v1/worker/gpu_worker.py determine_available_memory, with
 * vllm/utils/mem_utils.py memory_profiling; notes/llmservingsim-facts.md section 9):
 *
 *   requested = ceil(total * gpu_memory_utilization)            fixed at init_device
 *   non_kv    = weights_memory + torch_peak_increase + non_torch_increase
 *   kv        = requested - non_kv;   num_gpu_blocks = kv // block_bytes
 *
 * weights_memory is what PyTorch allocated while loading the model; torch_peak_increase the
 * allocator's peak during profile_run (a dummy forward over max_num_batched_tokens tokens spread
 * over min(tokens, max_num_seqs) requests, then a dummy sampler run over one row per request)
 * above what was allocated before it; non_torch_increase the growth of device memory outside
 * PyTorch's allocator since the baseline snapshot. kvsim cannot measure the last two: it
 * estimates them (activation_bytes), as documented at estimate_activation_bytes below.
 */
#include "runtime/engine/engine.h"
#include "runtime/input/input.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB UINT64_C(1048576)

/* ---- reading config.json ------------------------------------------------------------------- */

/*
 * Reads root[key] as an integer in [1, UINT32_MAX] into *out. An absent or null key is an error
 * when required, else leaves *out and returns 1. Returns 0 when read, -EINVAL with a message.
 */
static int get_pos_u32(json_t *root, const char *key, bool required, uint32_t *out,
                       const char *path, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        if (!required)
            return 1;
        snprintf(err, errlen, "%s: field '%s' is missing (a positive integer)", path, key);
        return -EINVAL;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
        json_integer_value(v) > (json_int_t)UINT32_MAX) {
        snprintf(err, errlen, "%s: field '%s' must be a positive integer (at most %" PRIu32 ")",
                 path, key, UINT32_MAX);
        return -EINVAL;
    }
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

/*
 * The expert-count fields of the mixture-of-experts configs Hugging Face ships (Qwen-MoE:
 * num_experts; Mixtral: num_local_experts; DeepSeek: n_routed_experts), and the fields of the MoE
 * variants kvsim cannot size or time: shared experts beside the routed ones, and dense MLP layers
 * among the MoE ones.
 */
static const char *const moe_fields[] = {"num_experts", "num_local_experts", "n_routed_experts"};
static const char *const moe_unsupported[] = {"n_shared_experts", "shared_expert_intermediate_size",
                                              "first_k_dense_replace"};

/* A non-negative integer field, absent or null as 0. Returns 0 or -EINVAL with the message. */
static int get_count(json_t *root, const char *key, uint32_t *out, const char *path, char *err,
                     size_t errlen)
{
    json_t *v = json_object_get(root, key);
    *out = 0;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (json_int_t)UINT32_MAX) {
        snprintf(err, errlen, "%s: field '%s' must be a non-negative integer", path, key);
        return -EINVAL;
    }
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

/* The MoE fields into a (num_experts 0: a dense model). Returns 0 or -EINVAL. */
static int parse_moe(json_t *root, const char *path, struct kvsim_model_arch *a, char *err,
                     size_t errlen)
{
    const char *field = NULL;
    for (size_t i = 0; i < sizeof moe_fields / sizeof moe_fields[0]; i++) {
        uint32_t n;
        int rc = get_count(root, moe_fields[i], &n, path, err, errlen);
        if (rc)
            return rc;
        if (n > 0 && !a->num_experts) {
            a->num_experts = n;
            field = moe_fields[i];
        }
    }
    if (!a->num_experts)
        return 0;
    for (size_t i = 0; i < sizeof moe_unsupported / sizeof moe_unsupported[0]; i++) {
        uint32_t n;
        int rc = get_count(root, moe_unsupported[i], &n, path, err, errlen);
        if (rc)
            return rc;
        if (n > 0) {
            snprintf(err, errlen,
                     "%s: field '%s' is %u: kvsim models mixture-of-experts decoders whose every "
                     "MLP is routed experts only (no shared experts, no dense layers)",
                     path, moe_unsupported[i], n);
            return -EINVAL;
        }
    }
    uint32_t step;
    int rc = get_count(root, "decoder_sparse_step", &step, path, err, errlen);
    if (rc)
        return rc;
    json_t *dense_layers = json_object_get(root, "mlp_only_layers");
    if (step > 1 || (json_is_array(dense_layers) && json_array_size(dense_layers) > 0)) {
        snprintf(err, errlen,
                 "%s: %s: kvsim models mixture-of-experts decoders whose every MLP is routed "
                 "experts only (no dense layers)",
                 path,
                 step > 1 ? "field 'decoder_sparse_step' is above 1"
                          : "field 'mlp_only_layers' is not empty");
        return -EINVAL;
    }
    if ((rc = get_pos_u32(root, "num_experts_per_tok", true, &a->experts_per_tok, path, err,
                          errlen)))
        return rc;
    if (a->experts_per_tok > a->num_experts) {
        snprintf(err, errlen,
                 "%s: field 'num_experts_per_tok' (%u) is above the experts ('%s': %u)", path,
                 a->experts_per_tok, field, a->num_experts);
        return -EINVAL;
    }
    a->moe_intermediate_size = a->intermediate_size;
    rc = get_pos_u32(root, "moe_intermediate_size", false, &a->moe_intermediate_size, path, err,
                     errlen);
    return rc < 0 ? rc : 0;
}

/* torch_dtype (or dtype, its newer name in transformers) into bytes per element. */
static int get_dtype_bytes(json_t *root, uint32_t *out, const char *path, char *err, size_t errlen)
{
    const char *key = "torch_dtype";
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        json_t *d = json_object_get(root, "dtype");
        if (d != NULL && !json_is_null(d)) {
            key = "dtype";
            v = d;
        }
    }
    if (v == NULL || json_is_null(v)) {
        snprintf(err, errlen, "%s: field 'torch_dtype' is missing (bfloat16, float16 or float32)",
                 path);
        return -EINVAL;
    }
    const char *s = json_string_value(v);
    if (s != NULL && (strcmp(s, "bfloat16") == 0 || strcmp(s, "float16") == 0)) {
        *out = 2;
        return 0;
    }
    if (s != NULL && strcmp(s, "float32") == 0) {
        *out = 4;
        return 0;
    }
    snprintf(err, errlen, "%s: field '%s' is %s%s%s: kvsim models bfloat16, float16 and float32",
             path, key, s ? "'" : "not a string", s ? s : "", s ? "'" : "");
    return -EINVAL;
}

/* Writes ORG/NAME from path's last two components, without ".json", into out. */
static int name_from_path(const char *path, char *out, size_t len)
{
    const char *end = path + strlen(path);
    if (end - path >= 5 && strcmp(end - 5, ".json") == 0)
        end -= 5;
    const char *start = end;
    int slashes = 0;
    while (start > path) {
        if (start[-1] == '/' && ++slashes == 2)
            break;
        start--;
    }
    size_t n = (size_t)(end - start);
    if (n == 0 || n >= len)
        return -1;
    memcpy(out, start, n);
    out[n] = '\0';
    return 0;
}

static int parse_arch(json_t *root, const char *path, const char *name, struct kvsim_model_arch *a,
                      char *err, size_t errlen)
{
    int rc;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: a model config must be a JSON object", path);
        return -EINVAL;
    }

    if (name != NULL) {
        if (*name == '\0' || strlen(name) >= sizeof a->name) {
            snprintf(err, errlen, "%s: model name '%s' must have 1 to %zu characters", path, name,
                     sizeof a->name - 1);
            return -EINVAL;
        }
        strcpy(a->name, name);
    } else if (name_from_path(path, a->name, sizeof a->name) != 0) {
        snprintf(err, errlen, "%s: cannot name the model after its path (pass a name)", path);
        return -EINVAL;
    }

    json_t *mt = json_object_get(root, "model_type");
    if (mt != NULL && !json_is_null(mt)) {
        const char *s = json_string_value(mt);
        if (s == NULL || strlen(s) >= sizeof a->model_type) {
            snprintf(err, errlen, "%s: field 'model_type' must be a string of at most %zu chars",
                     path, sizeof a->model_type - 1);
            return -EINVAL;
        }
        strcpy(a->model_type, s);
    }

    if ((rc = get_pos_u32(root, "num_hidden_layers", true, &a->num_layers, path, err, errlen)) ||
        (rc = get_pos_u32(root, "hidden_size", true, &a->hidden_size, path, err, errlen)) ||
        (rc = get_pos_u32(root, "num_attention_heads", true, &a->num_heads, path, err, errlen)) ||
        (rc = get_pos_u32(root, "intermediate_size", true, &a->intermediate_size, path, err,
                          errlen)) ||
        (rc = get_pos_u32(root, "vocab_size", true, &a->vocab_size, path, err, errlen)))
        return rc;

    a->num_kv_heads = a->num_heads;
    if ((rc = get_pos_u32(root, "num_key_value_heads", false, &a->num_kv_heads, path, err,
                          errlen)) < 0)
        return rc;
    if (a->num_heads % a->num_kv_heads != 0) {
        snprintf(err, errlen,
                 "%s: field 'num_key_value_heads' (%" PRIu32
                 ") must divide num_attention_heads (%" PRIu32 ")",
                 path, a->num_kv_heads, a->num_heads);
        return -EINVAL;
    }

    rc = get_pos_u32(root, "head_dim", false, &a->head_dim, path, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        if (a->hidden_size % a->num_heads != 0) {
            snprintf(err, errlen,
                     "%s: field 'head_dim' is missing and hidden_size (%" PRIu32
                     ") is not a multiple of num_attention_heads (%" PRIu32 ")",
                     path, a->hidden_size, a->num_heads);
            return -EINVAL;
        }
        a->head_dim = a->hidden_size / a->num_heads;
    }

    if ((rc = get_dtype_bytes(root, &a->dtype_bytes, path, err, errlen)) != 0)
        return rc;

    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie != NULL && !json_is_null(tie)) {
        if (!json_is_boolean(tie)) {
            snprintf(err, errlen, "%s: field 'tie_word_embeddings' must be true or false", path);
            return -EINVAL;
        }
        a->tie_word_embeddings = json_is_true(tie);
    }

    if ((rc = get_pos_u32(root, "max_position_embeddings", false, &a->max_position_embeddings, path,
                          err, errlen)) < 0)
        return rc;
    return parse_moe(root, path, a, err, errlen);
}

int kvsim_model_arch_load(const char *path, const char *name, struct kvsim_model_arch *out,
                          char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root;
    int lrc = kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &root, &jerr);
    if (lrc) {
        if (json_error_code(&jerr) == json_error_cannot_open_file) {
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(-lrc));
            return -ENOENT;
        }
        kvsim_json_error_message(path, &jerr, err, errlen);
        return lrc;
    }
    struct kvsim_model_arch a;
    memset(&a, 0, sizeof a);
    int rc = parse_arch(root, path, name, &a, err, errlen);
    json_decref(root);
    if (rc == 0)
        *out = a;
    return rc;
}

/* ---- capacity ------------------------------------------------------------------------------ */

/* Checked uint64 arithmetic: an overflow sets *ovf and the result is meaningless. */
static uint64_t mul(uint64_t x, uint64_t y, bool *ovf)
{
    uint64_t r;
    if (__builtin_mul_overflow(x, y, &r))
        *ovf = true;
    return r;
}

static uint64_t add(uint64_t x, uint64_t y, bool *ovf)
{
    uint64_t r;
    if (__builtin_add_overflow(x, y, &r))
        *ovf = true;
    return r;
}

static uint64_t max_u64(uint64_t x, uint64_t y) { return x > y ? x : y; }

/* vLLM's VocabParallelEmbedding and ParallelLMHead pad the vocabulary to a multiple of 64
 * (DEFAULT_VOCAB_PADDING_SIZE) and give each rank an equal shard. */
static uint64_t vocab_per_rank(const struct kvsim_model_arch *a, uint32_t tp)
{
    uint64_t padded = ((uint64_t)a->vocab_size + 63) / 64 * 64;
    return (padded + tp - 1) / tp;
}

/* vLLM's QKVParallelLinear splits KV heads over the ranks, replicating them when fewer than tp. */
static uint64_t kv_heads_per_rank(const struct kvsim_model_arch *a, uint32_t tp)
{
    return a->num_kv_heads >= tp ? a->num_kv_heads / tp : 1;
}

/* The GPUs one MoE layer's experts are spread over: tp x dp (vLLM flattens DP into the MoE's
 * TP, or uses them all as EP ranks). */
static uint32_t moe_ranks(const struct kvsim_gpu_config *g)
{
    return g->tp * (g->data_parallel_size > 1 ? g->data_parallel_size : 1);
}

/*
 * One rank's expert weights of one layer (elements): each expert is a merged gate_up projection
 * (hidden x 2 moe_intermediate) and a down projection (moe_intermediate x hidden). With expert
 * parallelism a rank owns experts / (tp x dp) whole experts; without it every rank holds a
 * 1 / (tp x dp) slice of every expert's intermediate dimension (vllm/model_executor/layers/
 * fused_moe/config.py, FusedMoEParallelConfig.make and flatten_tp_across_dp_and_pcp).
 */
static uint64_t moe_expert_elems(const struct kvsim_model_arch *a, const struct kvsim_gpu_config *g,
                                 bool *ovf)
{
    uint64_t n = moe_ranks(g);
    uint64_t per_expert = mul(3 * (uint64_t)a->hidden_size, a->moe_intermediate_size, ovf);
    if (g->enable_expert_parallel)
        return mul(a->num_experts / n, per_expert, ovf);
    return mul(a->num_experts, per_expert / n, ovf);
}

/*
 * One rank's weight bytes, as vLLM's Llama/Qwen3 modules hold them: the vocabulary shard of the
 * embedding; per layer two RMSNorms (replicated), the QKV projection (q heads split over ranks,
 * KV heads split or replicated), o_proj, the merged gate_up projection and down_proj (split),
 * and for qwen3 and qwen3_moe the q/k RMSNorms (head_dim each); the final norm; the lm_head shard
 * unless it is tied to the embedding. A mixture-of-experts layer holds, instead of the dense
 * MLP, the router gate (hidden_size x experts, replicated: vLLM's ReplicatedLinear) and its share
 * of the experts (moe_expert_elems).
 */
static uint64_t weight_bytes(const struct kvsim_model_arch *a, const struct kvsim_gpu_config *g,
                             bool *ovf)
{
    uint32_t tp = g->tp;
    uint64_t h = a->hidden_size;
    uint64_t q_rank = (uint64_t)a->num_heads / tp * a->head_dim;
    uint64_t kv_rank = kv_heads_per_rank(a, tp) * a->head_dim;
    uint64_t ffn_rank = (uint64_t)a->intermediate_size / tp;
    uint64_t v_rank = vocab_per_rank(a, tp);

    uint64_t layer = 2 * h; /* input and post-attention norm */
    if (strcmp(a->model_type, "qwen3") == 0 || strcmp(a->model_type, "qwen3_moe") == 0)
        layer = add(layer, 2 * (uint64_t)a->head_dim, ovf);     /* q_norm and k_norm */
    layer = add(layer, mul(h, q_rank + 2 * kv_rank, ovf), ovf); /* qkv_proj */
    layer = add(layer, mul(q_rank, h, ovf), ovf);               /* o_proj */
    if (a->num_experts) {
        layer = add(layer, mul(h, a->num_experts, ovf), ovf); /* the router gate */
        layer = add(layer, moe_expert_elems(a, g, ovf), ovf);
    } else {
        layer = add(layer, mul(h, 2 * ffn_rank, ovf), ovf); /* gate_up_proj */
        layer = add(layer, mul(ffn_rank, h, ovf), ovf);     /* down_proj */
    }

    uint64_t elems = mul(v_rank, h, ovf); /* embed_tokens */
    elems = add(elems, mul(layer, a->num_layers, ovf), ovf);
    elems = add(elems, h, ovf); /* final norm */
    if (!a->tie_word_embeddings)
        elems = add(elems, mul(h, v_rank, ovf), ovf); /* lm_head */
    return mul(elems, a->dtype_bytes, ovf);
}

/*
 * The estimator's one calibrated constant: the non-torch memory vLLM 0.19's profile counts at
 * tp 1 (non_torch_increase: device memory outside PyTorch's allocator gained between the
 * baseline snapshot, taken after the CUDA context exists, and the end of the profile run --
 * the CUDA modules loaded lazily by the first forward: torch.compile's Triton kernels, cuBLAS,
 * FlashAttention, the sampler's kernels). Nothing published breaks it out for vLLM 0.19, so it
 * is calibrated: it is what the one published vLLM 0.19.0 figure (RTX 4090, Llama-3.1-8B bf16,
 * util 0.9, max_num_batched_tokens 2048, max_num_seqs 256: num_gpu_blocks 2588, LLMServingSim
 * 5daddb2 bench/examples/RTX4090/Llama-3.1-8B/vllm/meta.json) leaves after the weights and the
 * terms below that follow from the model's shapes: 725,514,651 to 727,611,802 bytes give 2588
 * blocks, and 693 MiB (726,663,168) sits inside. Earlier vLLMs logged 0.35 GiB on an RTX 3090
 * (V0 0.6.x, CUDA context included; vllm-project/vllm#10517) and 0.16 GiB on an H100 (eager,
 * vllm-project/vllm#12126). That one figure pins only the sum of this constant and the
 * sampler term: had the dummy sampler taken PyTorch's sort path (38 bytes a logit, below) it
 * would leave no room for non-torch memory at all. The split matters only where max_num_seqs
 * or the vocabulary differ from the 4090 run: about 0.5 % of the blocks of the RTX PRO 6000
 * runs (128 sequences).
 */
#define NON_TORCH_BYTES (693 * MIB)

/*
 * Bytes per logit at the dummy sampler's peak, beyond the logits' own dtype: the fp32 copy the
 * v1 Sampler makes (logits.to(float32)) and two more fp32 tensors of the logits' shape that its
 * top-k/top-p step holds at once -- the probabilities and the exponential noise of
 * random_sample (vllm/v1/sample/ops/topk_topp_sampler.py, after the in-place Triton top-k/top-p
 * mask), or the masked logits and probabilities of FlashInfer's
 * top_k_top_p_sampling_from_logits. (PyTorch's sort-based fallback would hold 38 bytes per
 * logit: sorted values, int64 indices, the segmented sort's int64 iota and CUB's key/value
 * double buffers.) The dummy run sets top_k = vocab - 1 and top_p = 0.9, so the step runs.
 */
#define SAMPLER_FP32_TENSORS 3

/*
 * estimate_activation_bytes - the rest of vLLM's non-KV memory, beyond the weights counted by
 * weight_bytes, for max_num_batched_tokens T and S = min(T, max_num_seqs) dummy requests:
 *
 *   rope      = max_position_embeddings * head_dim * dtype
 *               The rotary cos/sin cache (RotaryEmbedding.cos_sin_cache, one per model),
 *               allocated with the weights and so part of vLLM's weights_memory: issue #10517's
 *               "Loading model weights took 14.9888 GB" for Llama-3.1-8B is 16,060,522,496
 *               parameter bytes + 131072 * 128 * 2 = 33,554,432 bytes, exactly.
 *   forward   = T * dtype * 3 * (intermediate_size / tp + hidden_size)
 *               The dummy forward's largest live set, at an MLP: the gate_up output (2 * ffn),
 *               SiluAndMul's output (ffn), and three hidden-size tensors (the residual stream,
 *               the normed MLP input, the projection output). Checked against vLLM's logged
 *               activation peaks for Llama-3.1-8B on an RTX 3090 (#10517: 2.07 GiB at 20000
 *               tokens, 2.99 GiB at 29000 tokens, a slope of 109.8 kB per token; this term's
 *               slope is 110.6 kB, +0.8 %).
 *   sampler   = T * hidden_size * dtype + S * vocab_size * (dtype + 4 * SAMPLER_FP32_TENSORS)
 *               The dummy sampler run, while the forward's output is still held: S rows of
 *               logits (the full vocabulary on every rank: vLLM gathers them) in the model's
 *               dtype plus the fp32 tensors above.
 *   torch     = max(forward, sampler)     one after the other: the peaks do not add
 *   non_torch = NON_TORCH_BYTES           the same at every tp: vLLM initialises NCCL (and its
 *               warm-up all-reduce) before the baseline snapshot, so its buffers are not
 *               counted (gpu_worker.py init_device)
 *
 *   activation_bytes = rope + torch + non_torch
 *
 * Not modelled: CUDA-graph memory (subtracted only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS,
 * off by default in 0.19), the allocator's rounding, multimodal encoders, LoRA, spec decoding.
 */
static uint64_t estimate_activation_bytes(const struct kvsim_model_arch *a,
                                          const struct kvsim_gpu_config *g, bool *ovf)
{
    uint64_t t = g->max_num_batched_tokens;
    uint64_t s = g->max_num_seqs < t ? g->max_num_seqs : t;
    uint64_t d = a->dtype_bytes;
    uint64_t h = a->hidden_size;

    uint64_t rope = mul(mul(a->max_position_embeddings, a->head_dim, ovf), d, ovf);
    uint64_t forward = mul(mul(t, d, ovf), 3 * ((uint64_t)a->intermediate_size / g->tp + h), ovf);
    if (a->num_experts) {
        /* The fused MoE's three intermediate caches: every token's experts_per_tok rows of the
         * gate_up output (2 N), the activation (N) and the down output (hidden), N the rank's
         * slice of moe_intermediate; the rank sees the tokens of all its DP peers (they are
         * gathered before the experts). */
        uint64_t ranks = moe_ranks(g), dp = ranks / g->tp;
        uint64_t n =
            g->enable_expert_parallel ? a->moe_intermediate_size : a->moe_intermediate_size / ranks;
        forward = mul(mul(mul(t, dp, ovf), mul(d, a->experts_per_tok, ovf), ovf), 3 * n + h, ovf);
    }
    uint64_t sampler = add(mul(mul(t, h, ovf), d, ovf),
                           mul(mul(s, a->vocab_size, ovf), d + 4 * SAMPLER_FP32_TENSORS, ovf), ovf);
    return add(add(rope, max_u64(forward, sampler), ovf), NON_TORCH_BYTES, ovf);
}

static int check_arch(const struct kvsim_model_arch *a, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (a->num_layers == 0)
        bad = "num_layers";
    else if (a->hidden_size == 0)
        bad = "hidden_size";
    else if (a->num_heads == 0)
        bad = "num_heads";
    else if (a->num_kv_heads == 0)
        bad = "num_kv_heads";
    else if (a->head_dim == 0)
        bad = "head_dim";
    else if (a->intermediate_size == 0)
        bad = "intermediate_size";
    else if (a->vocab_size == 0)
        bad = "vocab_size";
    else if (a->dtype_bytes == 0)
        bad = "dtype_bytes";
    if (bad != NULL) {
        snprintf(err, errlen, "model '%s': %s must be > 0", a->name, bad);
        return -EINVAL;
    }
    return 0;
}

static int check_gpu(const struct kvsim_model_arch *a, const struct kvsim_gpu_config *g, char *err,
                     size_t errlen)
{
    if (!(g->gpu_memory_utilization > 0.0 && g->gpu_memory_utilization <= 1.0)) {
        snprintf(err, errlen, "gpu_memory_utilization %g is outside (0, 1]",
                 g->gpu_memory_utilization);
        return -EINVAL;
    }
    if (!(g->gpu_memory_gib > 0.0) || !isfinite(g->gpu_memory_gib) ||
        g->gpu_memory_gib * GIB >= 0x1p63) {
        snprintf(err, errlen, "gpu_memory_gib %g must be a finite number of GiB > 0",
                 g->gpu_memory_gib);
        return -EINVAL;
    }
    if (g->tp == 0) {
        snprintf(err, errlen, "tensor_parallel_size must be >= 1");
        return -EINVAL;
    }
    if (g->block_size == 0) {
        snprintf(err, errlen, "block_size must be >= 1");
        return -EINVAL;
    }
    if (g->max_num_batched_tokens == 0 || g->max_num_seqs == 0) {
        snprintf(err, errlen,
                 "max_num_batched_tokens and max_num_seqs must be >= 1 (the "
                 "profile run is sized by them)");
        return -EINVAL;
    }
    if (a->num_heads % g->tp != 0) {
        snprintf(err, errlen,
                 "model '%s': tensor_parallel_size %" PRIu32
                 " does not divide num_attention_heads (%" PRIu32 ")",
                 a->name, g->tp, a->num_heads);
        return -EINVAL;
    }
    if (kvsim_expert_parallel_check(a, g->tp, g->data_parallel_size, g->enable_expert_parallel, err,
                                    errlen))
        return -EINVAL;
    if (a->num_experts && !g->enable_expert_parallel &&
        a->moe_intermediate_size % moe_ranks(g) != 0) {
        snprintf(err, errlen,
                 "model '%s': %" PRIu32
                 " ranks (tp x dp) do not divide moe_intermediate_size (%" PRIu32 ")",
                 a->name, moe_ranks(g), a->moe_intermediate_size);
        return -EINVAL;
    }
    if (!a->num_experts && a->intermediate_size % g->tp != 0) {
        snprintf(err, errlen,
                 "model '%s': tensor_parallel_size %" PRIu32
                 " does not divide intermediate_size (%" PRIu32 ")",
                 a->name, g->tp, a->intermediate_size);
        return -EINVAL;
    }
    if (a->num_kv_heads >= g->tp ? a->num_kv_heads % g->tp != 0 : g->tp % a->num_kv_heads != 0) {
        snprintf(err, errlen,
                 "model '%s': num_key_value_heads (%" PRIu32 ") and tensor_parallel_size %" PRIu32
                 " must divide one another",
                 a->name, a->num_kv_heads, g->tp);
        return -EINVAL;
    }
    return 0;
}

int kvsim_expert_parallel_check(const struct kvsim_model_arch *a, uint32_t tp,
                                uint32_t data_parallel_size, bool enable_expert_parallel, char *err,
                                size_t errlen)
{
    struct kvsim_gpu_config g = {.tp = tp ? tp : 1, .data_parallel_size = data_parallel_size};
    if (!a->num_experts || !enable_expert_parallel || a->num_experts % moe_ranks(&g) == 0)
        return 0;
    snprintf(err, errlen,
             "model '%s': expert parallelism over %" PRIu32 " ranks (tp x dp) does not divide its "
             "%" PRIu32 " experts (each rank holds whole experts)",
             a->name, moe_ranks(&g), a->num_experts);
    return -EINVAL;
}

int kvsim_gpu_capacity_derive(const struct kvsim_model_arch *a, const struct kvsim_gpu_config *g,
                              struct kvsim_gpu_capacity *out, char *err, size_t errlen)
{
    int rc;
    if ((rc = check_arch(a, err, errlen)) != 0 || (rc = check_gpu(a, g, err, errlen)) != 0)
        return rc;

    bool ovf = false;
    struct kvsim_gpu_capacity c;
    memset(&c, 0, sizeof c);
    /* vLLM: requested_memory = math.ceil(total_memory * gpu_memory_utilization), in doubles. */
    c.requested_bytes = (uint64_t)ceil(g->gpu_memory_gib * GIB * g->gpu_memory_utilization);
    c.weight_bytes = weight_bytes(a, g, &ovf);
    c.activation_bytes = estimate_activation_bytes(a, g, &ovf);
    uint64_t per_layer_token = mul(2 * kv_heads_per_rank(a, g->tp), a->head_dim, &ovf);
    c.block_bytes = mul(mul(mul(per_layer_token, g->block_size, &ovf), a->dtype_bytes, &ovf),
                        a->num_layers, &ovf);
    c.kv_bytes_per_token =
        mul(mul(mul(2 * (uint64_t)a->num_kv_heads, a->head_dim, &ovf), a->dtype_bytes, &ovf),
            a->num_layers, &ovf);
    uint64_t non_kv = add(c.weight_bytes, c.activation_bytes, &ovf);
    if (ovf) {
        snprintf(err, errlen, "model '%s': its sizes overflow 64-bit byte counts", a->name);
        return -EINVAL;
    }

    if (non_kv >= c.requested_bytes || c.requested_bytes - non_kv < c.block_bytes) {
        /* vLLM: "No available memory for the cache blocks" (kv_cache_utils.py). */
        uint64_t want = add(non_kv, c.block_bytes, &ovf);
        snprintf(err, errlen,
                 "model '%s' at tp %" PRIu32 " on a %.2f GiB GPU at gpu_memory_utilization %g: "
                 "the requested %.2f GiB hold %.2f GiB of weights and %.2f GiB of activations "
                 "(estimated) but not one %.2f MiB KV block: %.2f GiB missing",
                 a->name, g->tp, g->gpu_memory_gib, g->gpu_memory_utilization,
                 (double)c.requested_bytes / GIB, (double)c.weight_bytes / GIB,
                 (double)c.activation_bytes / GIB, (double)c.block_bytes / (double)MIB,
                 (double)(want - c.requested_bytes) / GIB);
        return -EINVAL;
    }
    c.kv_bytes = c.requested_bytes - non_kv;
    c.num_gpu_blocks = c.kv_bytes / c.block_bytes; /* vLLM: available // page_size // layers */
    *out = c;
    return 0;
}
