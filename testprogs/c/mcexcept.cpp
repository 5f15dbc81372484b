// C++ exceptions through mcount-hooked frames (g++ -pg): `mcexcept N` throws from 3 frames deep N times,
// catches in `catcher`, then calls `leaf` 10 times; prints `caught=C leaf_calls=L`.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

static long leaf_calls;

__attribute__((noinline)) long leaf(long n) {
    leaf_calls++;
    asm volatile("" : "+r"(n));
    return n + 1;
}

__attribute__((noinline)) void thrower(int depth) {
    if (depth == 0) throw std::runtime_error("on purpose");
    thrower(depth - 1);
    leaf(depth);
}

__attribute__((noinline)) int catcher(int i) {
    try {
        leaf(i);
        thrower(2);
    } catch (const std::exception &) {
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? std::atoi(argv[1]) : 10;
    int caught = 0;
    for (int i = 0; i < n; i++) caught += catcher(i);
    for (int i = 0; i < 10; i++) leaf(i);
    std::printf("caught=%d leaf_calls=%ld\n", caught, leaf_calls);
    return 0;
}
