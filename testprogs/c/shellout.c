// Runs a program without sleds (the shell, and `true` through it) from a traced one: the children
// are left alone, with no trace file and no warning. Exits with the shell's status (4).
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

__attribute__((noinline)) int twice(int x) { return 2 * x; }

int main(void) {
    printf("twice=%d\n", twice(21));
    fflush(stdout);
    int status = system("true && exit 4");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
