/* `record -t` against uftrace's meaning (issue 38 item 2): calls whose durations fall far on either
 * side of the threshold, so that two runs keep the same calls. Built with gcc -pg (and clang-16
 * -fxray-instrument) for ferrotrace, gcc -pg for uftrace.
 *   main -> rounds x40 -> { quick x10, every 4th round: slow (spins 300 us) -> quick }
 *        -> tail (spins 300 us, from a thread of its own too)
 * With -t 50us: main, tail, the 10 rounds with a slow call, and those slow calls.
 */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static volatile long sink;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

__attribute__((noinline)) void quick(long n) { sink += n; }

__attribute__((noinline)) void spin(long ns) {
    long end = now_ns() + ns;
    while (now_ns() < end)
        sink++;
}

__attribute__((noinline)) void slow(long n) {
    spin(300000);
    quick(n);
}

__attribute__((noinline)) void rounds(long n) {
    for (long i = 0; i < 10; i++)
        quick(i);
    if (n % 4 == 0)
        slow(n);
}

__attribute__((noinline)) void tail(void) { spin(300000); }

static void *worker(void *arg) {
    (void)arg;
    tail();
    return NULL;
}

int main(void) {
    pthread_t t;
    for (long n = 0; n < 40; n++)
        rounds(n);
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    tail();
    printf("%ld\n", sink > 0 ? 40L : 0L);
    return 0;
}
