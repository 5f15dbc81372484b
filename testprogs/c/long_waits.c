/* A thread blocked in one long wait, to be attached to meanwhile (tests/attach.rs): prints "ready",
 * then waits 3 s in the system call named by argv[1] (nanosleep, clock_nanosleep, poll, epoll_wait,
 * sigtimedwait) and prints what it returned and how long it took: "nanosleep rc=0 errno=0 ms=3000".
 * An attach must not change either. Built plain (its wait_in entry patched): -pg would arm gprof's
 * SIGPROF timer, which cuts waits short on its own (tests/attach.rs says how). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

__attribute__((noinline)) static int wait_in(const char *call) {
    struct timespec three = {3, 0};
    if (!strcmp(call, "nanosleep"))
        return nanosleep(&three, NULL);
    if (!strcmp(call, "clock_nanosleep")) {
        int e = clock_nanosleep(CLOCK_MONOTONIC, 0, &three, NULL);
        errno = e;
        return e ? -1 : 0;
    }
    if (!strcmp(call, "poll")) {
        int fds[2];
        if (pipe(fds))
            return -2;
        struct pollfd p = {fds[0], POLLIN, 0};
        return poll(&p, 1, 3000);
    }
    if (!strcmp(call, "epoll_wait")) {
        int ep = epoll_create1(0);
        struct epoll_event ev;
        return epoll_wait(ep, &ev, 1, 3000);
    }
    if (!strcmp(call, "sigtimedwait")) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigprocmask(SIG_BLOCK, &set, NULL);
        return sigtimedwait(&set, NULL, &three);
    }
    return -2;
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    printf("ready\n");
    fflush(stdout);
    long long start = now_ms();
    errno = 0;
    int rc = wait_in(argv[1]);
    int e = errno;
    printf("%s rc=%d errno=%d ms=%lld\n", argv[1], rc, rc < 0 ? e : 0, now_ms() - start);
    return 0;
}
