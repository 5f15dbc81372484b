/* What one timestamp costs on this machine: `rdtsc` (what ferrotrace's hooks and trampolines read, twice
 * per traced call) and `clock_gettime(CLOCK_MONOTONIC)` (what uftrace's libmcount reads), each back to
 * back 20 M times. Build and run: gcc -O2 bench/timestamp_cost.c -o /tmp/timestamp_cost && /tmp/timestamp_cost */
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

static double elapsed_ns(struct timespec a, struct timespec b) {
    return (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
}

int main(void) {
    enum { N = 20000000 };
    struct timespec a, b;
    unsigned long long sum = 0; /* printed, so that the loops are not optimised away */
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < N; i++)
        sum += __rdtsc();
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("rdtsc: %.2f ns each\n", elapsed_ns(a, b) / N);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < N; i++) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        sum += (unsigned long long)t.tv_nsec;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("clock_gettime(CLOCK_MONOTONIC): %.2f ns each (checksum %llu)\n", elapsed_ns(a, b) / N, sum & 1);
    return 0;
}
