// Forks 20 children while four threads run traced code. Each child calls `work` 100 times and leaves
// with exit (even children) or _exit (odd ones); prints "bad=N", the number of children that failed.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

__attribute__((noinline)) int work(int x) { return x * 3; }

static void *spin(void *arg) {
    long n = 0;
    while (!stop) n += work(n & 7);
    return (void *)n;
}

int main(void) {
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) pthread_create(&threads[i], 0, spin, 0);
    int bad = 0;
    for (int k = 0; k < 20; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            volatile int sink = 0;
            for (int i = 0; i < 100; i++) sink += work(i);
            if (k & 1) _exit(0);
            exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad++;
    }
    stop = 1;
    for (int i = 0; i < 4; i++) pthread_join(threads[i], 0);
    printf("bad=%d\n", bad);
    return bad;
}
