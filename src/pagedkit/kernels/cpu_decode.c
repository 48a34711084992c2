/* Paged decode attention on a CPU, in C: what `cpu_decode.py` builds and calls.
 *
 * The same numbers as `reference.paged_decode_attention` (one new query token
 * per sequence over its paged K/V), computed the way paper section 4.1's
 * kernel does on a GPU: follow the block table and read each key and value
 * where it lies in the cache, with no gather into a contiguous copy first.
 * The batched torch path (`batched.py`) gathers every sequence's blocks,
 * then runs SDPA over the copy: three passes over K/V where this reads them
 * once, and ~25 small tensor ops per layer where this is one call.
 *
 * One task per (sequence, KV head), split over OpenMP threads. A task:
 *   1. scores:  s[j][t] = scale * (q_j . k_t) for the group's query heads j
 *      (grouped-query attention: a KV head is read once for all the query
 *      heads that share it), a softcap applied if given;
 *   2. softmax: m = max(s, sink), p = exp(s - m), sum = sum(p) + exp(sink - m);
 *   3. values:  out_j = sum_t p[j][t] * v_t / sum.
 * Keys t run over the sequence's context, from `ctx - window` with a sliding
 * window; key t sits in block tables[t / block_size], slot t % block_size.
 *
 * float32 only (caller's check), accumulated in float32 as the kernels do.
 * Compiled with -ffast-math (so exp vectorizes): nothing here relies on
 * infinities or NaN, and the maximum starts at -FLT_MAX, not -inf. (Linked
 * without it: see cpu_decode.py.) Threads: `num_threads`, or one for a call
 * of fewer than `grain` elements of K/V.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* A cache's layout: [num_blocks, block_size, num_kv_heads, head_dim], contiguous. */
static const float *slot_row(const float *cache, const int32_t *table, int pos, int block_size,
                             int num_kv_heads, int head_dim, int kv_head)
{
    int64_t slot = (int64_t)table[pos / block_size] * block_size + pos % block_size;
    return cache + (slot * num_kv_heads + kv_head) * head_dim;
}

/* Returns 0, or -1 when a thread's scratch memory could not be allocated. */
int paged_decode_f32(const float *query, int64_t q_seq_stride, int64_t q_head_stride,
                     const float *k_cache, const float *v_cache,
                     const int32_t *block_tables, int64_t table_stride,
                     const int32_t *context_lens, float *out,
                     int num_seqs, int num_q_heads, int num_kv_heads, int head_dim,
                     int block_size, float scale, int sliding_window, float softcap,
                     const float *sinks, int num_threads, int64_t grain)
{
    const int group = num_q_heads / num_kv_heads;
    const int64_t row_stride = (int64_t)num_kv_heads * head_dim;  /* one slot to the next */
    int longest = 1;
    int64_t keys = 0;
    for (int s = 0; s < num_seqs; s++) {
        if (context_lens[s] > longest) longest = context_lens[s];
        keys += context_lens[s];
    }
    /* Threads only for work worth a hand-off (`grain` elements of K/V, torch's
       32,768): waking a second thread costs more than a small call's work, and
       far more when it must wait for a busy core. */
    if (keys * row_stride < grain) num_threads = 1;
    int failed = 0;

    #pragma omp parallel num_threads(num_threads)
    {
        /* per thread: the scores of one task, its output sums and denominators */
        float *scores = malloc(sizeof(float) * (size_t)group * longest);
        float *acc = malloc(sizeof(float) * (size_t)group * head_dim);
        float *denom = malloc(sizeof(float) * (size_t)group);
        if (!scores || !acc || !denom) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(static)
        for (int task = 0; task < num_seqs * num_kv_heads; task++) {
            if (!scores || !acc || !denom) continue;
            const int s = task / num_kv_heads, h = task % num_kv_heads;
            const int ctx = context_lens[s];
            const int first = sliding_window > 0 && ctx > sliding_window ? ctx - sliding_window : 0;
            const int len = ctx - first;
            const int32_t *table = block_tables + s * table_stride;
            const float *q = query + s * q_seq_stride + (int64_t)h * group * q_head_stride;

            /* 1. scores, one block's run of slots at a time (no division per key) */
            for (int t = 0; t < len;) {
                const int pos = first + t, in_block = block_size - pos % block_size;
                const int run = in_block < len - t ? in_block : len - t;
                const float *k = slot_row(k_cache, table, pos, block_size, num_kv_heads,
                                          head_dim, h);
                for (int r = 0; r < run; r++, t++, k += row_stride) {
                    for (int j = 0; j < group; j++) {
                        const float *qj = q + j * q_head_stride;
                        float dot = 0.f;
                        #pragma omp simd reduction(+:dot)
                        for (int i = 0; i < head_dim; i++) dot += qj[i] * k[i];
                        dot *= scale;
                        if (softcap > 0.f) dot = softcap * tanhf(dot / softcap);
                        scores[j * len + t] = dot;
                    }
                }
            }
            /* 2. softmax per query head, a sink joining the denominator */
            for (int j = 0; j < group; j++) {
                float *p = scores + j * len;
                float top = sinks ? sinks[h * group + j] : -FLT_MAX;
                for (int t = 0; t < len; t++) top = p[t] > top ? p[t] : top;
                float sum = sinks ? expf(sinks[h * group + j] - top) : 0.f;
                #pragma omp simd reduction(+:sum)
                for (int t = 0; t < len; t++) {
                    p[t] = expf(p[t] - top);
                    sum += p[t];
                }
                denom[j] = sum;
                for (int i = 0; i < head_dim; i++) acc[j * head_dim + i] = 0.f;
            }
            /* 3. the weighted sum of the values */
            for (int t = 0; t < len;) {
                const int pos = first + t, in_block = block_size - pos % block_size;
                const int run = in_block < len - t ? in_block : len - t;
                const float *v = slot_row(v_cache, table, pos, block_size, num_kv_heads,
                                          head_dim, h);
                for (int r = 0; r < run; r++, t++, v += row_stride) {
                    for (int j = 0; j < group; j++) {
                        const float p = scores[j * len + t];
                        float *a = acc + j * head_dim;
                        #pragma omp simd
                        for (int i = 0; i < head_dim; i++) a[i] += p * v[i];
                    }
                }
            }
            for (int j = 0; j < group; j++) {
                float *o = out + ((int64_t)s * num_q_heads + h * group + j) * head_dim;
                const float inv = 1.f / denom[j];
                for (int i = 0; i < head_dim; i++) o[i] = acc[j * head_dim + i] * inv;
            }
        }
        free(scores);
        free(acc);
        free(denom);
    }
    return failed ? -1 : 0;
}
