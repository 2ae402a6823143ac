/* CPU kernels for the two attention hot paths: the estimator's edge softmax attention over every
 * interaction-graph edge, and the wide network's multi-head attention over fixed sampled slots.
 *
 * Each forward pass makes one sweep over the destinations (query rows) with every per-edge value in
 * registers, so nothing of size E x d is ever materialised. Each backward pass makes two sweeps: one over
 * the destinations (gradients of queries, edge-type terms and a per-edge scalar), and one over the sources
 * grouped with `sgt_group_by` (gradients of keys and values). The second sweep replaces a scatter, which
 * would need atomics or one gradient buffer per thread.
 *
 * Results do not depend on the number of threads or their scheduling: every output row is computed by one
 * thread in a fixed order, and the small [C, d] edge-type gradients are summed per fixed block of rows,
 * then over the blocks in order.
 *
 * The Python side (sgt_core/kernels/library.py) compiles this file, and
 * sgt_core/models/fused_{edge,slot}_attention.py call it through ctypes with contiguous tensors of the
 * dtypes each signature names, after checking dtypes and index bounds; their torch implementations are
 * the reference these kernels are tested against.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rows per block of the edge-type gradient partial sums. */
#define ROWS_PER_BLOCK 256
/* How many edges ahead the edge kernels prefetch the node row they will gather. Their gathers are random
 * (expander edges have no locality), so past the CPU caches (about 10^6 nodes) each one is a trip to
 * memory; asking for it this far ahead overlaps the trips instead of taking them one after another. */
#define PREFETCH_EDGES 32

/* Counting sort: groups `count` items by key in [0, n). Items with key k are order[ptr[k] .. ptr[k+1]),
 * in ascending item order. ptr has n + 1 entries. Returns 0, or 1 when out of memory. */
int sgt_group_by(const int64_t *key, int64_t count, int64_t n, int64_t *ptr, int64_t *order) {
    int64_t *next = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!next) return 1;
    memset(ptr, 0, (size_t)(n + 1) * sizeof(int64_t));
    for (int64_t item = 0; item < count; item++) ptr[key[item] + 1]++;
    for (int64_t k = 0; k < n; k++) ptr[k + 1] += ptr[k];
    memcpy(next, ptr, (size_t)n * sizeof(int64_t));
    for (int64_t item = 0; item < count; item++) order[next[key[item]]++] = item;
    free(next);
    return 0;
}

/* Sums `blocks` partial tables of `size` floats into `total`, block by block in order. */
static void sum_blocks(const float *partial, int64_t blocks, int64_t size, float *total) {
    #pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < size; k++) {
        float sum = 0.0f;
        for (int64_t b = 0; b < blocks; b++) sum += partial[b * size + k];
        total[k] = sum;
    }
}

/* ---------------------------------------------------------------------------------------------------
 * Edge softmax attention (the estimator). For an edge e = j -> i with code c:
 *   z_e = clip(((E_c * K_j) . Q_i / sqrt(d) + B_c) / tau, +-clip),  a_e = softmax over i's edges,
 *   out_i = sum_e a_e V_j.
 * Edges are sorted by destination: node i's edges are ptr[i] .. ptr[i+1). Indices are int32 and codes
 * uint8 (the caller checks the bounds): at Amazon2M's 200 M attention edges every byte per edge is 200 MB.
 * Keys and values come interleaved, one [K_j | V_j] row per node (64 bytes at d = 8, one cache line), so
 * each edge costs one random memory access in the forward pass instead of two.
 * ------------------------------------------------------------------------------------------------- */

/* The edges grouped by source, once per graph: the k-th edge leaving source j (k in src_ptr[j] ..
 * src_ptr[j+1), edges in ascending order) is edge by_src_edge[k], with destination by_src_dst[k] and code
 * by_src_code[k]: the backward pass's sweep over sources reads destinations and codes in order, and
 * gathers only each edge's two gradient terms.
 * Returns 0, or 1 when out of memory. */
int sgt_edges_by_source(
    int64_t num_nodes, const int64_t *ptr, const int32_t *src, const uint8_t *code,
    int64_t *src_ptr, int32_t *by_src_edge, int32_t *by_src_dst, uint8_t *by_src_code)
{
    const int64_t num_edges = ptr[num_nodes];
    int64_t *next = malloc((size_t)(num_nodes > 0 ? num_nodes : 1) * sizeof(int64_t));
    if (!next) return 1;
    memset(src_ptr, 0, (size_t)(num_nodes + 1) * sizeof(int64_t));
    for (int64_t e = 0; e < num_edges; e++) src_ptr[src[e] + 1]++;
    for (int64_t j = 0; j < num_nodes; j++) src_ptr[j + 1] += src_ptr[j];
    memcpy(next, src_ptr, (size_t)num_nodes * sizeof(int64_t));
    for (int64_t i = 0; i < num_nodes; i++) {
        for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
            const int64_t k = next[src[e]]++;
            by_src_edge[k] = (int32_t)e;
            by_src_dst[k] = (int32_t)i;
            by_src_code[k] = code[e];
        }
    }
    free(next);
    return 0;
}

void sgt_edge_attention_forward(
    int64_t num_nodes, int64_t d,
    const float *query, const float *key_value,                   /* [N, d], [N, 2d] */
    const float *edge_scale, const float *edge_bias,              /* [C, d], [C] */
    const int64_t *ptr, const int32_t *src, const uint8_t *code,  /* [N + 1], [E], [E] */
    float temperature, float clip,
    float *out, float *scores, uint8_t *inside)                   /* [N, d], [E], [E] */
{
    const float scale = 1.0f / sqrtf((float)d);
    const int64_t num_edges = ptr[num_nodes];
    #pragma omp parallel for schedule(dynamic, 64)
    for (int64_t i = 0; i < num_nodes; i++) {
        const float *q = query + i * d;
        float *o = out + i * d;
        float total = 0.0f;
        for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
            if (e + PREFETCH_EDGES < num_edges) __builtin_prefetch(key_value + (int64_t)src[e + PREFETCH_EDGES] * 2 * d);
            const float *k = key_value + (int64_t)src[e] * 2 * d, *es = edge_scale + code[e] * d;
            float raw = 0.0f;
            #pragma omp simd reduction(+:raw)
            for (int64_t t = 0; t < d; t++) raw += q[t] * k[t] * es[t];
            float z = (raw * scale + edge_bias[code[e]]) / temperature;
            inside[e] = fabsf(z) < clip;
            z = fminf(fmaxf(z, -clip), clip);  /* |z| <= clip <= 30: exp cannot overflow, no max needed */
            float w = expf(z);
            scores[e] = w;
            total += w;
        }
        for (int64_t t = 0; t < d; t++) o[t] = 0.0f;
        const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
        for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
            const float a = scores[e] * inv_total;
            const float *v = key_value + (int64_t)src[e] * 2 * d + d;  /* the line the key came from */
            scores[e] = a;
            #pragma omp simd
            for (int64_t t = 0; t < d; t++) o[t] += a * v[t];
        }
    }
}

/* grad_scores may be NULL (the scores output took no gradient). query_grad rows are [Q_i | dL/d out_i];
 * the by_src_* arrays come from sgt_edges_by_source. edge_terms is scratch of 2 E floats,
 * (d loss / d raw logit, score) per edge: written in order, gathered (with prefetching) by the sweep over
 * sources; gathering is cheaper than scattering, which reads each line before writing it. Returns 0, or 1 when out of memory. */
int sgt_edge_attention_backward(
    int64_t num_nodes, int64_t d, int64_t num_codes,
    const float *query_grad, const float *key_value, const float *edge_scale,  /* [N, 2d], [N, 2d], [C, d] */
    const int64_t *ptr, const int32_t *src, const uint8_t *code, const int32_t *by_src_edge,
    const int64_t *src_ptr, const int32_t *by_src_dst, const uint8_t *by_src_code,
    const float *scores, const uint8_t *inside, float temperature, const float *grad_scores,
    float *grad_query, float *grad_key_value,                                  /* [N, d], [N, 2d] */
    float *grad_edge_scale, float *grad_edge_bias,                             /* [C, d], [C] */
    float *edge_terms)
{
    const float scale = 1.0f / sqrtf((float)d);
    const int64_t num_edges = ptr[num_nodes];
    const int64_t blocks = (num_nodes + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    const int64_t table = num_codes * (d + 1);  /* E rows, then B */
    float *partial = calloc((size_t)(blocks > 0 ? blocks : 1) * (size_t)table, sizeof(float));
    float *totals = malloc((size_t)table * sizeof(float));
    if (!partial || !totals) {
        free(partial);
        free(totals);
        return 1;
    }

    /* Sweep 1, over destinations: d loss / d logit per edge, then queries and edge-type terms. */
    #pragma omp parallel for schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; b++) {
        float *part_scale = partial + b * table, *part_bias = part_scale + num_codes * d;
        const int64_t end = (b + 1) * ROWS_PER_BLOCK < num_nodes ? (b + 1) * ROWS_PER_BLOCK : num_nodes;
        for (int64_t i = b * ROWS_PER_BLOCK; i < end; i++) {
            const float *q = query_grad + i * 2 * d, *go = q + d;
            float *gq = grad_query + i * d;
            /* softmax backward: expected = sum_e a_e g_e, with g_e = d loss / d a_e; g_e waits in the
             * first slot of the edge's source-ordered pair */
            float expected = 0.0f;
            for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
                if (e + PREFETCH_EDGES < num_edges) __builtin_prefetch(key_value + (int64_t)src[e + PREFETCH_EDGES] * 2 * d);
                const float *v = key_value + (int64_t)src[e] * 2 * d + d;
                float g = grad_scores ? grad_scores[e] : 0.0f;
                #pragma omp simd reduction(+:g)
                for (int64_t t = 0; t < d; t++) g += go[t] * v[t];
                edge_terms[2 * e] = g;
                expected += scores[e] * g;
            }
            for (int64_t t = 0; t < d; t++) gq[t] = 0.0f;
            for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
                float *terms = edge_terms + 2 * e;
                /* gradient of the bias term B_c; the clip passes none outside (-clip, clip) */
                const float g_bias = inside[e] ? scores[e] * (terms[0] - expected) / temperature : 0.0f;
                const float g_raw = g_bias * scale;
                terms[0] = g_raw;
                terms[1] = scores[e];
                const float *k = key_value + (int64_t)src[e] * 2 * d, *es = edge_scale + code[e] * d;
                float *ps = part_scale + code[e] * d;
                #pragma omp simd
                for (int64_t t = 0; t < d; t++) {
                    gq[t] += g_raw * k[t] * es[t];
                    ps[t] += g_raw * q[t] * k[t];
                }
                part_bias[code[e]] += g_bias;
            }
        }
    }
    sum_blocks(partial, blocks, table, totals);
    memcpy(grad_edge_scale, totals, (size_t)(num_codes * d) * sizeof(float));
    memcpy(grad_edge_bias, totals + num_codes * d, (size_t)num_codes * sizeof(float));
    free(totals);
    free(partial);

    /* Sweep 2, over sources: keys and values gather from the edges leaving them, whose terms are in
     * order; the one random access per edge is the destination's [Q_i | dL/d out_i] row. */
    #pragma omp parallel for schedule(dynamic, 64)
    for (int64_t j = 0; j < num_nodes; j++) {
        float *gk = grad_key_value + j * 2 * d, *gv = gk + d;
        for (int64_t t = 0; t < 2 * d; t++) gk[t] = 0.0f;
        for (int64_t k = src_ptr[j]; k < src_ptr[j + 1]; k++) {
            if (k + PREFETCH_EDGES < num_edges) {
                __builtin_prefetch(query_grad + (int64_t)by_src_dst[k + PREFETCH_EDGES] * 2 * d);
                __builtin_prefetch(edge_terms + 2 * (int64_t)by_src_edge[k + PREFETCH_EDGES]);
            }
            const float *terms = edge_terms + 2 * (int64_t)by_src_edge[k];
            const float g_raw = terms[0], a = terms[1];
            const float *q = query_grad + (int64_t)by_src_dst[k] * 2 * d, *go = q + d;
            const float *es = edge_scale + by_src_code[k] * d;
            #pragma omp simd
            for (int64_t t = 0; t < d; t++) {
                gk[t] += g_raw * q[t] * es[t];
                gv[t] += a * go[t];
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------
 * Slot attention (the wide network). Query row i attends over its `deg` slots m (key row n = nb[i, m],
 * code c, mask); per head h with head width dh:
 *   z = (E_c^h * K_n^h) . Q_i^h / sqrt(dh) + B_c^h,  a = softmax over i's unmasked slots (0 on masked),
 *   out_i^h = sum_m a V_n^h.
 * key_value rows are [K | V], 2D wide. A row with no unmasked slot gets zeros.
 * ------------------------------------------------------------------------------------------------- */

void sgt_slot_attention_forward(
    int64_t num_queries, int64_t deg, int64_t hidden, int64_t heads,
    const float *query, const float *key_value,                         /* [Q, D], [K, 2D] */
    const float *edge_scale, const float *edge_bias,                    /* [C, D], [C, H] */
    const int64_t *neighbours, const int64_t *code, const uint8_t *mask,  /* [Q, deg] each */
    float *out, float *attention)                                       /* [Q, D], [Q, deg, H] */
{
    const int64_t dh = hidden / heads;
    const float scale = 1.0f / sqrtf((float)dh);
    #pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < num_queries; i++) {
        const float *q = query + i * hidden;
        float *a = attention + i * deg * heads, *o = out + i * hidden;
        for (int64_t h = 0; h < heads; h++) {
            float largest = -INFINITY;
            for (int64_t m = 0; m < deg; m++) {
                const int64_t slot = i * deg + m;
                if (!mask[slot]) continue;
                const float *k = key_value + neighbours[slot] * 2 * hidden + h * dh;
                const float *es = edge_scale + code[slot] * hidden + h * dh;
                const float *qh = q + h * dh;
                float raw = 0.0f;
                #pragma omp simd reduction(+:raw)
                for (int64_t t = 0; t < dh; t++) raw += qh[t] * k[t] * es[t];
                const float z = raw * scale + edge_bias[code[slot] * heads + h];
                a[m * heads + h] = z;
                if (z > largest) largest = z;
            }
            float total = 0.0f;
            for (int64_t m = 0; m < deg; m++) {
                const int64_t slot = i * deg + m;
                const float w = mask[slot] ? expf(a[m * heads + h] - largest) : 0.0f;
                a[m * heads + h] = w;
                total += w;
            }
            const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
            float *oh = o + h * dh;
            for (int64_t t = 0; t < dh; t++) oh[t] = 0.0f;
            for (int64_t m = 0; m < deg; m++) {
                const int64_t slot = i * deg + m;
                const float w = a[m * heads + h] * inv_total;
                a[m * heads + h] = w;
                if (w == 0.0f) continue;
                const float *v = key_value + neighbours[slot] * 2 * hidden + hidden + h * dh;
                #pragma omp simd
                for (int64_t t = 0; t < dh; t++) oh[t] += w * v[t];
            }
        }
    }
}

/* by_key_ptr / by_key_order group the Q * deg slots by key row (sgt_group_by over neighbours, n = K).
 * slot_grad is scratch of Q * deg * H floats. Returns 0, or 1 when out of memory. */
int sgt_slot_attention_backward(
    int64_t num_queries, int64_t num_keys, int64_t deg, int64_t hidden, int64_t heads, int64_t num_codes,
    const float *query, const float *key_value, const float *edge_scale,
    const int64_t *neighbours, const int64_t *code,
    const int64_t *by_key_ptr, const int64_t *by_key_order,
    const float *attention, const float *grad_out,
    float *grad_query, float *grad_key_value, float *grad_edge_scale, float *grad_edge_bias,
    float *slot_grad)
{
    const int64_t dh = hidden / heads;
    const float scale = 1.0f / sqrtf((float)dh);
    const int64_t blocks = (num_queries + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    const int64_t table = num_codes * (hidden + heads);  /* E rows, then B rows */
    float *partial = calloc((size_t)(blocks > 0 ? blocks : 1) * (size_t)table, sizeof(float));
    float *totals = malloc((size_t)table * sizeof(float));
    if (!partial || !totals) {
        free(partial);
        free(totals);
        return 1;
    }

    /* Sweep 1, over query rows: d loss / d logit per slot and head, then queries and edge-type terms. */
    #pragma omp parallel for schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; b++) {
        float *part_scale = partial + b * table, *part_bias = part_scale + num_codes * hidden;
        const int64_t end = (b + 1) * ROWS_PER_BLOCK < num_queries ? (b + 1) * ROWS_PER_BLOCK : num_queries;
        for (int64_t i = b * ROWS_PER_BLOCK; i < end; i++) {
            const float *q = query + i * hidden, *go = grad_out + i * hidden;
            const float *a = attention + i * deg * heads;
            float *sg = slot_grad + i * deg * heads, *gq = grad_query + i * hidden;
            for (int64_t t = 0; t < hidden; t++) gq[t] = 0.0f;
            for (int64_t h = 0; h < heads; h++) {
                const float *goh = go + h * dh;
                float expected = 0.0f;
                for (int64_t m = 0; m < deg; m++) {  /* d loss / d weight, and the softmax's expectation */
                    const float *v = key_value + neighbours[i * deg + m] * 2 * hidden + hidden + h * dh;
                    float g = 0.0f;
                    #pragma omp simd reduction(+:g)
                    for (int64_t t = 0; t < dh; t++) g += goh[t] * v[t];
                    sg[m * heads + h] = g;
                    expected += a[m * heads + h] * g;
                }
                for (int64_t m = 0; m < deg; m++) {
                    const int64_t slot = i * deg + m;
                    const float w = a[m * heads + h];
                    const float g_logit = w * (sg[m * heads + h] - expected);  /* masked slots: w = 0 */
                    const float g_raw = g_logit * scale;
                    sg[m * heads + h] = g_raw;
                    if (w == 0.0f) continue;
                    const float *k = key_value + neighbours[slot] * 2 * hidden + h * dh;
                    const float *es = edge_scale + code[slot] * hidden + h * dh;
                    const float *qh = q + h * dh;
                    float *gqh = gq + h * dh, *ps = part_scale + code[slot] * hidden + h * dh;
                    #pragma omp simd
                    for (int64_t t = 0; t < dh; t++) {
                        gqh[t] += g_raw * k[t] * es[t];
                        ps[t] += g_raw * qh[t] * k[t];
                    }
                    part_bias[code[slot] * heads + h] += g_logit;
                }
            }
        }
    }
    sum_blocks(partial, blocks, table, totals);
    memcpy(grad_edge_scale, totals, (size_t)(num_codes * hidden) * sizeof(float));
    memcpy(grad_edge_bias, totals + num_codes * hidden, (size_t)(num_codes * heads) * sizeof(float));
    free(totals);
    free(partial);

    /* Sweep 2, over key rows: keys and values gather from the slots that point at them. */
    #pragma omp parallel for schedule(dynamic, 64)
    for (int64_t j = 0; j < num_keys; j++) {
        float *gk = grad_key_value + j * 2 * hidden, *gv = gk + hidden;
        for (int64_t t = 0; t < 2 * hidden; t++) gk[t] = 0.0f;
        for (int64_t idx = by_key_ptr[j]; idx < by_key_ptr[j + 1]; idx++) {
            const int64_t slot = by_key_order[idx], i = slot / deg;
            const float *q = query + i * hidden, *go = grad_out + i * hidden;
            const float *es = edge_scale + code[slot] * hidden;
            for (int64_t h = 0; h < heads; h++) {
                const float w = attention[slot * heads + h], g_raw = slot_grad[slot * heads + h];
                if (w == 0.0f && g_raw == 0.0f) continue;
                #pragma omp simd
                for (int64_t t = h * dh; t < (h + 1) * dh; t++) {
                    gk[t] += g_raw * q[t] * es[t];
                    gv[t] += w * go[t];
                }
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------
 * Randomness: a counter-based generator. Draw number `counter` of a call seeded with `seed` is the
 * SplitMix64 finaliser of seed + golden-ratio * (counter + 1): independent of threads and order, so a
 * seed gives the same sample on any number of cores. The seed of each call comes from the caller's
 * torch.Generator, so runs stay reproducible from the configured seed.
 * ------------------------------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1), 53 random bits. */
static inline double uniform01(uint64_t seed, uint64_t counter) {
    return ((double)(mix64(seed, counter) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Sampling methods, as in sgt_core/sampling/reservoir.py. */
#define SAMPLE_RESERVOIR 0
#define SAMPLE_UNIFORM 1
#define SAMPLE_TOPK 2

/* Draws `degree` incoming edges per node without replacement (Efraimidis-Spirakis reservoir keys
 * log(u) / a, the largest `degree` win), or uniformly, or the highest-scored (ties at random). Nodes with
 * at most `degree` candidates keep all of them; unused slots get -1. The uniform draw of edge e is counter
 * e, so a node's sample does not depend on which other nodes are sampled with it. edges is [Q, degree]. */
void sgt_sample_neighbours(
    int64_t num_queries, const int64_t *nodes, const int64_t *ptr, const float *scores,
    int64_t degree, int64_t method, uint64_t seed, int64_t *edges)
{
    #pragma omp parallel
    {
        double *best_key = malloc((size_t)(degree > 0 ? degree : 1) * sizeof(double));
        #pragma omp for schedule(dynamic, 64)
        for (int64_t q = 0; q < num_queries; q++) {
            const int64_t node = nodes ? nodes[q] : q, start = ptr[node], count = ptr[node + 1] - start;
            int64_t *out = edges + q * degree;
            if (count <= degree) {
                for (int64_t m = 0; m < degree; m++) out[m] = m < count ? start + m : -1;
                continue;
            }
            /* keep the `degree` largest keys, sorted descending, by insertion */
            int64_t kept = 0;
            for (int64_t e = start; e < start + count; e++) {
                const double u = uniform01(seed, (uint64_t)e);
                double key;
                if (method == SAMPLE_UNIFORM) key = u;
                else if (method == SAMPLE_TOPK) key = (double)scores[e] + u * 1e-12;
                else key = scores[e] > 0.0f ? log(u) / (double)scores[e] : -INFINITY;  /* zero weight: last */
                if (kept == degree && !(key > best_key[kept - 1])) continue;
                int64_t m = kept < degree ? kept++ : degree - 1;
                while (m > 0 && best_key[m - 1] < key) {
                    best_key[m] = best_key[m - 1];
                    out[m] = out[m - 1];
                    m--;
                }
                best_key[m] = key;
                out[m] = e;
            }
        }
        free(best_key);
    }
}

/* Dropout's keep mask: element i is kept (1) with probability 1 - p. */
void sgt_dropout_mask(int64_t count, double p, uint64_t seed, uint8_t *keep) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; i++) keep[i] = uniform01(seed, (uint64_t)i) >= p;
}
