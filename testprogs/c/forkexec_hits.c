/* Forks a child that execs /bin/true (or, with ARGV[1] "noexec", only exits), waits for it, then
 * calls `malloc` and `write` ARGV[2] times each (1,000 by default): tests/profile_bpf.rs counts those
 * hits after a fork (issue 37 item 2). Built with -fno-builtin so that the malloc/free pairs stay. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int exec = !(argc > 1 && strcmp(argv[1], "noexec") == 0);
    int n = argc > 2 ? atoi(argv[2]) : 1000;
    pid_t c = fork();
    if (c == 0) {
        if (exec) execl("/bin/true", "true", (char *)0);
        _exit(0);
    }
    waitpid(c, 0, 0);
    for (int i = 0; i < n; i++) {
        void *volatile p = malloc(64);
        (void)!write(-1, "x", 1);
        free(p);
    }
    return 0;
}
