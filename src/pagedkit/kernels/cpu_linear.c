/* A linear layer's product for a few rows on a CPU, in C: what `cpu_linear.py`
 * builds and calls.
 *
 * y = x @ W^T for x of M rows (M small: a decode step's tokens) and a weight
 * W of N outputs x K inputs. With few rows a product is bound by reading W,
 * not by arithmetic, so the point is to read W once, in order, and to keep
 * every partial sum in registers while it streams by:
 *
 *   - W is packed once (`cpu_linear.pack`) into panels of NB = 64 outputs:
 *     panel b holds W[b*64 : b*64+64, :] transposed, [K][64], so row k of a
 *     panel is 64 consecutive floats (four 512-bit vectors);
 *   - a tile of up to 4 rows of x runs down a panel: for each k it loads the
 *     panel's row k once and adds x[r][k] * that row to the tile's 4 x 64
 *     sums (16 vector registers). A product of M rows runs M/4 tiles, then
 *     one of M % 4, over each panel, which stays in the core's cache between
 *     tiles;
 *   - panels are split over OpenMP threads.
 *
 * The sums run over k in order, in float32 (another order than oneDNN's or
 * MKL's: float32 results differ in their last bits, ~1e-6 relative).
 * A panel past N is zero-padded; its extra outputs are not written.
 */
#include <stdint.h>
#include <string.h>

#define NB 64

/* R rows of x (row stride ldx) times one panel (K x NB), into R rows of y
 * (row stride ldy), `cols` of its outputs. Inlined with R a constant, so the
 * compiler unrolls the loops over rows and columns and keeps `acc` in registers. */
static inline __attribute__((always_inline)) void tile(
    const float *x, int64_t ldx, const float *panel, int64_t K, float *y, int64_t ldy,
    const int R, int cols)
{
    float acc[4][NB];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NB; j++)
            acc[r][j] = 0.f;
    for (int64_t k = 0; k < K; k++) {
        const float *w = panel + k * NB;
        for (int r = 0; r < R; r++) {
            const float xk = x[r * ldx + k];
            for (int j = 0; j < NB; j++)
                acc[r][j] += xk * w[j];
        }
    }
    for (int r = 0; r < R; r++)
        memcpy(y + r * ldy, acc[r], sizeof(float) * cols);
}

void linear_rows_f32(const float *x, int64_t ldx, const float *packed, float *y, int64_t ldy,
                     int64_t M, int64_t K, int64_t N, int num_threads)
{
    int64_t panels = (N + NB - 1) / NB;
    #pragma omp parallel for num_threads(num_threads) schedule(static) if (num_threads > 1)
    for (int64_t b = 0; b < panels; b++) {
        const float *panel = packed + b * K * NB;
        int cols = (int)(N - b * NB < NB ? N - b * NB : NB);
        int64_t r = 0;
        for (; M - r >= 4; r += 4)
            tile(x + r * ldx, ldx, panel, K, y + r * ldy + b * NB, ldy, 4, cols);
        switch (M - r) {
        case 3: tile(x + r * ldx, ldx, panel, K, y + r * ldy + b * NB, ldy, 3, cols); break;
        case 2: tile(x + r * ldx, ldx, panel, K, y + r * ldy + b * NB, ldy, 2, cols); break;
        case 1: tile(x + r * ldx, ldx, panel, K, y + r * ldy + b * NB, ldy, 1, cols); break;
        }
    }
}
