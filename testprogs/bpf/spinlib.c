/* A library the eBPF profiler's tests dlopen after start: lib_outer -> lib_inner, spinning, built
 * -O2 -fomit-frame-pointer -shared -fPIC (its frames unwind only by its .eh_frame). */
#include <time.h>

static volatile unsigned long sink;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__attribute__((noinline)) static int lib_inner(int ms) {
    double end = now_ms() + ms;
    unsigned long x = 0;
    while (now_ms() < end)
        for (int i = 0; i < 1000; i++)
            sink = x = x * 31 + i;
    return (int)(x & 1);
}

__attribute__((noinline)) int lib_outer(int ms) {
    volatile int pad[4] = {ms, 1, 2, 3};
    int r = lib_inner(pad[0]);
    sink += pad[3];
    return r + 1;
}
