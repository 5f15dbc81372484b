/* Known allocations for `ferrotrace record --alloc` and `ferrotrace mem`. Every figure the tests check
 * follows from this file: no stdio (its buffers would be allocations too); output through write(2).
 *
 *   allocs basic       leaks, a peak, temporaries, realloc growth, the aligned family, edge cases
 *   allocs threads N   N threads allocate blocks that the main thread frees (frees on another thread)
 *   allocs fork        a forked child leaks 777 bytes from child_leak() and exits
 *   allocs sample N    N allocations of 1..=4096 bytes (size i % 4096 + 1), every one freed
 *   allocs signals N   N malloc+free pairs while a 100 µs timer's handler allocates and frees too;
 *                      prints the number of handler runs
 *   allocs loop N      N malloc(64)+free pairs; prints the picoseconds per pair of the thread's CPU
 *                      time (time the machine gave to others does not count: it is shared)
 *   allocs whose       prints malloc_from=<the object whose malloc the program calls>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <sys/time.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void say(const char *s) { (void)!write(1, s, strlen(s)); }

static void say_num(const char *label, unsigned long v) {
    char buf[32];
    int i = sizeof buf;
    buf[--i] = '\n';
    do { buf[--i] = '0' + v % 10; v /= 10; } while (v);
    say(label);
    (void)!write(1, buf + i, sizeof buf - i);
}

/* Something the compiler cannot see through, so that no allocation is optimised away. */
static void *volatile sink;

/* 3 blocks of 1000 bytes, never freed. */
NOINLINE void leak_here(void) {
    for (int i = 0; i < 3; i++) {
        sink = malloc(1000);
    }
}

/* Peak: 10 blocks of 100000 bytes live at once (plus the 3000 leaked before), then freed. */
NOINLINE void build_peak(void) {
    void *blocks[10];
    for (int i = 0; i < 10; i++) blocks[i] = malloc(100000);
    sink = blocks[9];
    for (int i = 0; i < 10; i++) free(blocks[i]);
}

/* 50 temporaries: each freed before the thread's next allocation. */
NOINLINE void make_temporaries(void) {
    for (int i = 0; i < 50; i++) {
        char *p = malloc(64);
        p[0] = (char)i;
        sink = p;
        free(p);
    }
}

/* realloc growth: 1000, 2000, ... 10000 bytes (10 allocations, 55000 bytes), then freed. */
NOINLINE void grow(void) {
    char *p = NULL;
    for (int i = 1; i <= 10; i++) {
        p = realloc(p, (size_t)i * 1000);
        p[0] = (char)i;
    }
    sink = p;
    free(p);
}

/* One block each of the aligned family and calloc, all freed. */
NOINLINE void aligned_family(void) {
    void *p = NULL;
    if (posix_memalign(&p, 64, 4096) != 0) _exit(3);
    if ((unsigned long)p % 64 != 0) _exit(4);
    sink = p;
    free(p);
    p = aligned_alloc(256, 512);
    sink = p;
    free(p);
    p = memalign(128, 300);
    sink = p;
    free(p);
    p = valloc(200);
    sink = p;
    free(p);
    p = calloc(10, 100);
    sink = p;
    free(p);
    p = reallocarray(NULL, 4, 25);
    sink = p;
    free(p);
}

/* free(NULL), realloc(NULL, n), realloc(p, 0): one allocation of 77 bytes, freed by realloc(p, 0). */
NOINLINE void edge_cases(void) {
    free(NULL);
    void *p = realloc(NULL, 77);
    sink = p;
    p = realloc(p, 0);
    sink = p;
}

struct job { void *blocks[100]; };

static void *worker(void *arg) {
    struct job *j = arg;
    for (int i = 0; i < 100; i++) j->blocks[i] = malloc(48);
    return NULL;
}

NOINLINE void threads(int n) {
    pthread_t t[64];
    struct job jobs[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, &jobs[i]);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    /* The main thread frees what the workers allocated. */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 100; k++) free(jobs[i].blocks[k]);
}

NOINLINE void child_leak(void) { sink = malloc(777); }

NOINLINE void forked(void) {
    pid_t pid = fork();
    if (pid == 0) {
        child_leak();
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    sink = malloc(555);
    free(sink);
}

NOINLINE void sampled(long n) {
    for (long i = 0; i < n; i++) {
        void *p = malloc((size_t)(i % 4096 + 1));
        sink = p;
        free(p);
    }
}

static volatile unsigned long handled;

static void on_alarm(int sig) {
    (void)sig;
    /* Not async-signal-safe by the book, but programs do it: the tracer must survive it. */
    void *p = malloc(24);
    sink = p;
    free(p);
    handled++;
}

NOINLINE void with_signals(long n) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 100}, {0, 100}};
    setitimer(ITIMER_REAL, &it, NULL);
    for (long i = 0; i < n; i++) {
        void *p = malloc((size_t)(i % 512 + 1));
        sink = p;
        free(p);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    say_num("handled=", handled);
}

static unsigned long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (unsigned long)ts.tv_sec * 1000000000ul + (unsigned long)ts.tv_nsec;
}

NOINLINE void pairs(long n) {
    unsigned long t0 = now_ns();
    for (long i = 0; i < n; i++) {
        void *p = malloc(64);
        sink = p;
        free(p);
    }
    unsigned long t1 = now_ns();
    say_num("ps_per_pair=", (t1 - t0) * 1000 / (unsigned long)n);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 4;
    if (!strcmp(mode, "basic")) {
        leak_here();
        build_peak();
        make_temporaries();
        grow();
        aligned_family();
        edge_cases();
        say("basic done\n");
    } else if (!strcmp(mode, "whose")) {
        Dl_info info;
        void *f = dlsym(RTLD_DEFAULT, "malloc");
        say("malloc_from=");
        say(f && dladdr(f, &info) && info.dli_fname ? info.dli_fname : "?");
        say("\n");
    } else if (!strcmp(mode, "threads")) {
        threads((int)n);
        say("threads done\n");
    } else if (!strcmp(mode, "fork")) {
        forked();
        say("fork done\n");
    } else if (!strcmp(mode, "sample")) {
        sampled(n);
        say("sample done\n");
    } else if (!strcmp(mode, "signals")) {
        with_signals(n);
    } else if (!strcmp(mode, "loop")) {
        pairs(n);
    } else {
        say("unknown mode\n");
        return 2;
    }
    return 0;
}
