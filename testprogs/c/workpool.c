/* A multi-threaded program that runs until told to stop, for attaching to it (tests/dynamic.rs), built
 * with plain `gcc -O2 -pthread`: nothing in it was made for a tracer.
 *
 * Threads: the main thread reads commands from standard input (blocked in read); WORKERS workers each
 * wait in read() on their own pipe for a job; SPINNERS threads call mix() in a loop forever; a sleeper
 * calls nanosleep in a loop; a "faulter" thread, once told, faults inside the first 5 bytes of faulter()
 * and waits in its SIGSEGV handler until told again (the saved context then points inside those
 * bytes).
 *
 * Commands (one a line):
 *   N        each worker computes fib(N), counting its calls; prints "calls=C result=R" (C: the calls of
 *            all workers, R: fib(N), which every worker must agree on)
 *   fault    the faulter faults; prints "in handler" once its handler waits
 *   resume   the handler fixes the fault and returns; prints "faulter=V" (V = 42)
 *   q        prints "spins=S" and exits 0
 * A system call that fails with EINTR (a restart the kernel did not do) is reported and exits 3. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define WORKERS 4
#define SPINNERS 2

/* int faulter(int unused, const int *p): returns *p; the load is the second instruction of the first
 * 5 bytes (mov 3, mov 2). */
__asm__(".text\n.globl faulter\n.type faulter,@function\nfaulter:\n"
        "  mov %rdi, %rax\n  mov (%rsi), %eax\n  add $0, %eax\n  ret\n.size faulter, .-faulter\n");
int faulter(int unused, const int *p);

static _Thread_local unsigned long calls;
static atomic_ulong spins;
static int job_pipe[WORKERS][2], done_pipe[2], go_pipe[2], waiting_pipe[2], resume_pipe[2];
static const int answer = 42;

/* The empty asm after each recursive call keeps it a call (as in fibcount.c): without it gcc turns the
 * second into a loop, whose iterations would be counted as calls. */
__attribute__((noinline)) unsigned long fib(unsigned n) {
    calls++;
    if (n < 2) return n;
    unsigned long a = fib(n - 1);
    __asm__ volatile("" : "+r"(a));
    unsigned long b = fib(n - 2);
    __asm__ volatile("" : "+r"(b));
    return a + b;
}

/* Some work per call (about a microsecond), so that the spinners call it often but not at a rate
 * that fills a trace with millions of events in a second. */
__attribute__((noinline)) unsigned long mix(unsigned long x) {
    for (int i = 0; i < 300; i++) {
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdULL;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static void fail(const char *what) {
    fprintf(stderr, "workpool: %s: %s\n", what, strerror(errno));
    exit(errno == EINTR ? 3 : 2);
}

static void read_all(int fd, void *buf, size_t n) {
    ssize_t r = read(fd, buf, n);
    if (r != (ssize_t)n) fail("read");
}

static void write_all(int fd, const void *buf, size_t n) {
    if (write(fd, buf, n) != (ssize_t)n) fail("write");
}

struct result {
    unsigned long calls, value;
};

static void *worker(void *arg) {
    int i = (int)(long)arg;
    for (;;) {
        unsigned n;
        read_all(job_pipe[i][0], &n, sizeof n);
        calls = 0;
        struct result r = {0, fib(n)};
        r.calls = calls;
        write_all(done_pipe[1], &r, sizeof r);
    }
    return 0;
}

static void *spinner(void *arg) {
    unsigned long x = (unsigned long)arg + 1;
    for (;;) {
        x = mix(x);
        __asm__ volatile("" : "+r"(x));
        atomic_fetch_add_explicit(&spins, 1, memory_order_relaxed);
    }
    return 0;
}

static void *sleeper(void *arg) {
    (void)arg;
    struct timespec t = {0, 1000000};
    for (;;)
        if (nanosleep(&t, 0) != 0) fail("nanosleep");
    return 0;
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    char c = 1;
    write_all(waiting_pipe[1], &c, 1);
    read_all(resume_pipe[0], &c, 1);
    ucontext_t *uc = context;
    uc->uc_mcontext.gregs[REG_RSI] = (greg_t)&answer;
}

static void *faulting(void *arg) {
    (void)arg;
    char c;
    read_all(go_pipe[0], &c, 1); /* told to fault */
    int v = faulter(0, 0);
    printf("faulter=%d\n", v);
    fflush(stdout);
    return 0;
}

int main(void) {
    setvbuf(stdout, 0, _IOLBF, 0);
    for (int i = 0; i < WORKERS; i++)
        if (pipe(job_pipe[i])) fail("pipe");
    if (pipe(done_pipe) || pipe(go_pipe) || pipe(waiting_pipe) || pipe(resume_pipe)) fail("pipe");
    struct sigaction sa = {0};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, 0);
    pthread_t t;
    for (long i = 0; i < WORKERS; i++) pthread_create(&t, 0, worker, (void *)i);
    for (long i = 0; i < SPINNERS; i++) pthread_create(&t, 0, spinner, (void *)i);
    pthread_create(&t, 0, sleeper, 0);
    pthread_t fault_thread;
    pthread_create(&fault_thread, 0, faulting, 0);
    printf("ready\n");
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "q", 1)) break;
        if (!strncmp(line, "fault", 5)) {
            char c = 1;
            write_all(go_pipe[1], &c, 1);
            read_all(waiting_pipe[0], &c, 1);
            printf("in handler\n");
            continue;
        }
        if (!strncmp(line, "resume", 6)) {
            char c = 1;
            write_all(resume_pipe[1], &c, 1);
            pthread_join(fault_thread, 0);
            continue;
        }
        unsigned n = (unsigned)atoi(line);
        for (int i = 0; i < WORKERS; i++) write_all(job_pipe[i][1], &n, sizeof n);
        unsigned long total = 0, value = 0;
        for (int i = 0; i < WORKERS; i++) {
            struct result r;
            read_all(done_pipe[0], &r, sizeof r);
            if (i > 0 && r.value != value) {
                printf("workers disagree: %lu and %lu\n", value, r.value);
                return 4;
            }
            value = r.value;
            total += r.calls;
        }
        printf("calls=%lu result=%lu\n", total, value);
    }
    if (ferror(stdin)) fail("fgets");
    printf("spins=%lu\n", (unsigned long)atomic_load(&spins));
    return 0;
}
