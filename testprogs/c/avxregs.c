// A traced function's vector argument must come through the tracer whole. Each thread's first traced
// event (its registration, in the runtime's slow path, which runs libc code) is the entry of `scale`,
// whose __m256d argument is in ymm0. Prints "ok 8" when every lane came through, else the bad lanes
// (exit status 1). Build: clang-16 -O2 -mavx2 -fxray-instrument -fxray-instruction-threshold=1 -pthread
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>

__attribute__((noinline, xray_always_instrument)) __m256d scale(__m256d v, double k) {
    return _mm256_mul_pd(v, _mm256_set1_pd(k));
}

static int bad;

__attribute__((xray_never_instrument)) static void *worker(void *arg) {
    double base = (double)(long)arg;
    __m256d v = _mm256_set_pd(base + 4, base + 3, base + 2, base + 1);
    double out[4];
    _mm256_storeu_pd(out, scale(v, 2.0));
    for (int i = 0; i < 4; i++)
        if (out[i] != 2 * (base + i + 1)) {
            fprintf(stderr, "thread %ld lane %d: %g, expected %g\n", (long)arg, i, out[i], 2 * (base + i + 1));
            __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
        }
    return 0;
}

__attribute__((xray_never_instrument)) int main(void) {
    for (long t = 0; t < 8; t++) {
        pthread_t th;
        pthread_create(&th, 0, worker, (void *)t);
        pthread_join(th, 0);
    }
    if (bad) { printf("bad %d\n", bad); return 1; }
    printf("ok 8\n");
    return 0;
}
