/* ARGV[1] threads (64 by default) each calling `work` in a loop, the main thread blocked reading
 * its stdin: a busy process to attach to (bench/attach_busy.sh). */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline)) int work(int x) { return x * 3 + 1; }
static void *spin(void *a) { volatile int s = 0; for (;;) s = work(s); return a; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 64;
    pthread_t t;
    for (int i = 0; i < n; i++) pthread_create(&t, 0, spin, 0);
    char c; for (;;) if (read(0, &c, 1) <= 0) pause();
}
