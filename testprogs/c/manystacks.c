/* Two threads for ARGV[1] seconds (4 by default), each walking random paths 8 calls deep through 8
 * functions (8^8 distinct stacks) to a short spin: at a high sampling rate nearly every sample has a
 * stack of its own (tests/profile_bpf.rs: the in-kernel stack map is emptied as it is read). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef void (*step)(int, unsigned);
static step table[8];
static volatile unsigned long sink;

#define STEP(n)                                                                                    \
    __attribute__((noinline)) static void f##n(int depth, unsigned path) {                        \
        if (depth == 0) {                                                                          \
            for (int i = 0; i < 2000; i++) sink += i;                                              \
            return;                                                                                \
        }                                                                                          \
        table[path & 7](depth - 1, path >> 3);                                                     \
        sink++; /* not a tail call: the caller stays on the stack */                               \
    }
STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)

static double seconds;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *walk(void *seed) {
    unsigned r = (unsigned)(unsigned long)seed;
    double end = now() + seconds;
    while (now() < end) {
        for (int i = 0; i < 64; i++) {
            r = r * 1103515245u + 12345u;
            table[r & 7](8, r >> 8);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 4;
    step all[8] = {f0, f1, f2, f3, f4, f5, f6, f7};
    for (int i = 0; i < 8; i++) table[i] = all[i];
    pthread_t t;
    pthread_create(&t, 0, walk, (void *)1);
    walk((void *)2);
    pthread_join(t, 0);
    return 0;
}
