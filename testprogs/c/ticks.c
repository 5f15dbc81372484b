/* Probe hits over a span a test chooses (tests/continuous.rs): prints "ready", waits for SIGUSR1,
 * then calls tick() every millisecond until SIGUSR2, and prints how often it did: "ticks=N". A
 * uprobe on tick attached before SIGUSR1 counts exactly N hits, whatever the recording's periods. */
#include <signal.h>
#include <stdio.h>
#include <time.h>

static volatile sig_atomic_t started, stopped;

static void on_signal(int sig) {
    if (sig == SIGUSR1)
        started = 1;
    else
        stopped = 1;
}

__attribute__((noinline)) void tick(unsigned long i) {
    /* Kept as a call of its own. */
    __asm__ volatile("" : : "r"(i) : "memory");
}

int main(void) {
    sigset_t both, none;
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGUSR2);
    /* Blocked until waited for, so that neither arrives between a check and the wait. */
    sigprocmask(SIG_BLOCK, &both, &none);
    signal(SIGUSR1, on_signal);
    signal(SIGUSR2, on_signal);
    printf("ready\n");
    fflush(stdout);
    while (!started && !stopped)
        sigsuspend(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    const struct timespec gap = {0, 1000000};
    unsigned long n = 0;
    while (!stopped) {
        tick(n++);
        nanosleep(&gap, NULL);
    }
    printf("ticks=%lu\n", n);
    return 0;
}
