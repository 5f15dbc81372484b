/* Calls `work` every 2 ms for ARGV[1] rounds, then replaces itself with ARGV[2...] (execvp): a
 * program that execs while it is recorded (tests/attach.rs). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) int work(int x) { return x * 3 + 1; }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: execer ROUNDS PROGRAM [ARGS...]\n");
        return 2;
    }
    volatile int s = 0;
    for (long i = atol(argv[1]); i > 0; i--) {
        s = work(s);
        usleep(2000);
    }
    execvp(argv[2], argv + 2);
    perror("execvp");
    return 1;
}
