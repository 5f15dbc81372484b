/* A tiny JIT: copies a counting loop into an anonymous executable mapping and spins in it for about
 * 300 ms, as a JIT runs the code it generated. With the argument `map` it first lists the loop in
 * /tmp/perf-PID.map (perf's convention for naming JIT code) as `jit_spin_loop`. Prints the loop's
 * address. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* mov rax, rdi; 1: dec rax; jnz 1b; ret */
static const unsigned char LOOP[] = {0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0xc3};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memcpy(code, LOOP, sizeof LOOP);
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) {
        perror("mprotect");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "map") == 0) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
        FILE *map = fopen(path, "w");
        if (!map) {
            perror(path);
            return 1;
        }
        fprintf(map, "%lx %zx jit_spin_loop\n", (unsigned long)(uintptr_t)code, sizeof LOOP);
        fclose(map);
    }
    uint64_t (*loop)(uint64_t) = (uint64_t (*)(uint64_t))(void *)code;
    double start = now();
    while (now() - start < 0.3)
        loop(1000000);
    printf("loop=%p\n", (void *)code);
    return 0;
}
