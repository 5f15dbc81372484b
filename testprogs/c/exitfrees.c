/* Frees at the very end of a process, for `ferrotrace record --alloc`: one block freed by an atexit
 * handler, one by the program's ELF destructor, one 4000-byte block leaked. What leaks is 4,000 bytes
 * in 1 block (valgrind and heaptrack agree); a tracer that stops recording when exit begins reports the
 * other two as leaks too (7,000 bytes in 3 blocks).
 *
 * Built with -DLIBRARY -shared -fPIC, it is libexitfrees.so, whose lib_allocate() allocates 3000 bytes
 * that the library's own destructor frees; built with -DWITH_LIBRARY and linked to that library, the
 * program calls it too (still 4,000 bytes in 1 block leaked, of 10,000 allocated).
 *
 *   exitfrees          as above, exit by returning from main
 *   exitfrees exit     the same, ended by exit(0) from a function main calls
 *   exitfrees thread   the same, but the atexit handler's block is allocated by another thread, which
 *                      then calls exit(0) (main waits for it forever); that thread's own block, from
 *                      pthread_create, is leaked too (valgrind: 4,272 bytes in 2 blocks)
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

#ifdef LIBRARY
static void *volatile lib_block;

__attribute__((destructor)) static void lib_free_in_destructor(void) { free(lib_block); }

NOINLINE void lib_allocate(void) { lib_block = malloc(3000); }
#else
static void *volatile in_atexit;
static void *volatile in_destructor;
static void *volatile leaked;

static void free_at_exit(void) { free(in_atexit); }

__attribute__((destructor)) static void free_in_destructor(void) { free(in_destructor); }

NOINLINE void allocate_freed_at_exit(void) { in_atexit = malloc(1000); }
NOINLINE void allocate_freed_in_destructor(void) { in_destructor = malloc(2000); }
NOINLINE void leak_for_real(void) { leaked = malloc(4000); }

NOINLINE static void leave(void) { exit(0); }

static void *leave_from_thread(void *arg) {
    allocate_freed_at_exit();
    leave();
    return arg;
}

#ifdef WITH_LIBRARY
void lib_allocate(void);
#endif

int main(int argc, char **argv) {
    int threaded = argc > 1 && !strcmp(argv[1], "thread");
    if (!threaded) allocate_freed_at_exit();
    allocate_freed_in_destructor();
    leak_for_real();
#ifdef WITH_LIBRARY
    lib_allocate();
#endif
    atexit(free_at_exit);
    if (argc > 1 && !strcmp(argv[1], "exit")) leave();
    if (threaded) {
        pthread_t t;
        pthread_create(&t, NULL, leave_from_thread, NULL);
        pthread_join(t, NULL);
    }
    return 0;
}
#endif
