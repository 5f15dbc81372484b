/* Traced by the mcount tests, built with gcc -pg (and -mfentry, -mnop-mcount -mrecord-mcount) or
 * clang -pg. `mcwork MODE`:
 *   fib N       recursive fib; prints calls=C result=R elapsed_ns=T (its own count of fib calls, and the
 *               time fib(N) took, for benchmarks)
 *   threads     four named threads (worker-0..3), each calling `walk` 100*(i+1) times; prints
 *               `worker-I calls=C`
 *   longjmp     200 times: longjmp out of 3 nested traced frames back to `jumper`; then fib(10);
 *               prints `jumps=200 calls=C`
 *   signal      SIGUSR1 raised 100 times from inside `outer`; the handler calls fib(8) each time;
 *               prints `handled=H handler_calls=C`
 *   deep N      recursion N deep (`dive`); prints `depth=N`
 *   backtrace   backtrace() from 3 nested traced frames; prints the symbol names it finds
 *   switch      a coroutine (makecontext/swapcontext) that yields from inside a traced frame and is
 *               resumed after its caller returned: mcount tracing cannot follow the stack switch
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

static long calls;

__attribute__((noinline)) long fib(long n) {
    calls++;
    if (n < 2) return n;
    long a = fib(n - 1);
    __asm__ volatile("" : "+r"(a));
    return a + fib(n - 2);
}

__attribute__((noinline)) long walk(long n) {
    __asm__ volatile("" : "+r"(n));
    return n + 1;
}

static void *worker(void *arg) {
    long i = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", i);
    pthread_setname_np(pthread_self(), name);
    long c = 0;
    for (long k = 0; k < 100 * (i + 1); k++) c += walk(k) > 0;
    printf("%s calls=%ld\n", name, c);
    return NULL;
}

static jmp_buf env;

__attribute__((noinline)) void thrower(int depth) {
    if (depth == 0) longjmp(env, 1);
    thrower(depth - 1);
    walk(depth); /* never reached */
}

__attribute__((noinline)) int jumper(void) {
    if (setjmp(env) == 0) {
        thrower(2);
        return 0;
    }
    return 1;
}

static volatile sig_atomic_t handled;
static long handler_calls;

static void on_usr1(int sig) {
    (void)sig;
    long before = calls;
    fib(8);
    handler_calls += calls - before;
    handled++;
}

__attribute__((noinline)) void outer(int i) {
    walk(i);
    raise(SIGUSR1);
    walk(i);
}

__attribute__((noinline)) long dive(long n) {
    if (n == 0) return 0;
    long r = dive(n - 1);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

__attribute__((noinline)) void show_backtrace(void) {
    void *frames[32];
    int n = backtrace(frames, 32);
    char **names = backtrace_symbols(frames, n);
    for (int i = 0; i < n; i++) printf("frame %s\n", names[i]);
    free(names);
}

__attribute__((noinline)) void level2(void) { show_backtrace(); }
__attribute__((noinline)) void level1(void) { level2(); }

static ucontext_t main_ctx, coro_ctx;
static char coro_stack[64 * 1024];

__attribute__((noinline)) void coro(void) {
    walk(1);
    swapcontext(&coro_ctx, &main_ctx);
    walk(2);
}

__attribute__((noinline)) void start_coro(void) {
    getcontext(&coro_ctx);
    coro_ctx.uc_stack.ss_sp = coro_stack;
    coro_ctx.uc_stack.ss_size = sizeof coro_stack;
    coro_ctx.uc_link = &main_ctx;
    makecontext(&coro_ctx, coro, 0);
    swapcontext(&main_ctx, &coro_ctx);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "fib";
    if (!strcmp(mode, "fib")) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        long r = fib(argc > 2 ? atol(argv[2]) : 20);
        clock_gettime(CLOCK_MONOTONIC, &b);
        long ns = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
        printf("calls=%ld result=%ld elapsed_ns=%ld\n", calls, r, ns);
    } else if (!strcmp(mode, "threads")) {
        pthread_t t[4];
        for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)i);
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    } else if (!strcmp(mode, "longjmp")) {
        int jumps = 0;
        for (int i = 0; i < 200; i++) jumps += jumper();
        fib(10);
        printf("jumps=%d calls=%ld\n", jumps, calls);
    } else if (!strcmp(mode, "signal")) {
        signal(SIGUSR1, on_usr1);
        for (int i = 0; i < 100; i++) outer(i);
        printf("handled=%d handler_calls=%ld\n", (int)handled, handler_calls);
    } else if (!strcmp(mode, "deep")) {
        long n = argc > 2 ? atol(argv[2]) : 1000;
        printf("depth=%ld\n", dive(n));
    } else if (!strcmp(mode, "backtrace")) {
        level1();
    } else if (!strcmp(mode, "switch")) {
        start_coro();
        swapcontext(&main_ctx, &coro_ctx);
        printf("coroutine done\n");
    } else {
        fprintf(stderr, "usage: mcwork fib N|threads|longjmp|signal|deep N|backtrace|switch\n");
        return 2;
    }
    return 0;
}
