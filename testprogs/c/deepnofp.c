/* Allocations five calls deep in code built without frame pointers (-fomit-frame-pointer -O2):
 * main -> level_a -> level_b -> level_c -> level_d -> level_e -> malloc. Each level keeps a value
 * live across its call and uses the result afterwards, so that no call is a tail call and each frame
 * has a different size; none is inlined. The stack of every allocation must show every level.
 *
 *   deepnofp N   N allocations of 48 bytes, all leaked but the last one freed at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEVEL __attribute__((noinline, noclone))

static volatile int sink;

LEVEL static char *level_e(int i) {
    char *p = malloc(48);
    if (p)
        memset(p, i, 48);
    return p;
}

LEVEL static char *level_d(int i) {
    volatile int pad[3] = {i, i + 1, i + 2};
    char *p = level_e(i + pad[1]);
    sink += pad[2];
    return p;
}

LEVEL static char *level_c(int i) {
    volatile long pad[5] = {i, i, i, i, i};
    char *p = level_d(i * 3);
    sink += (int)pad[4];
    return p;
}

LEVEL static char *level_b(int i) {
    char buf[40];
    snprintf(buf, sizeof buf, "%d", i);
    char *p = level_c(i ^ 5);
    sink += buf[0];
    return p;
}

LEVEL static char *level_a(int i) {
    volatile int pad = i;
    char *p = level_b(i + 7);
    sink += pad;
    return p;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    char *last = NULL;
    for (int i = 0; i < n; i++) {
        last = level_a(i);
        sink += last[0];
    }
    free(last);
    printf("%d allocations\n", n);
    return 0;
}
