/* A fib that counts its own calls, for tracing programs nobody rebuilt (crates/ferrotrace-cli/tests/
 * dynamic.rs, bench/dynamic.sh), built plain (`gcc -O2`) or with XRay sleds. The empty asm after each
 * recursive call keeps it a call: without it gcc turns the second into a loop, whose iterations the
 * program would count as calls. `fibcount [N=20]` prints `calls=C result=R`. */
#include <stdio.h>
#include <stdlib.h>

static long calls;

__attribute__((noinline)) long fib(long n) {
    calls++;
    if (n < 2) return n;
    long a = fib(n - 1);
    __asm__ volatile("" : "+r"(a));
    long b = fib(n - 2);
    __asm__ volatile("" : "+r"(b));
    return a + b;
}

int main(int argc, char **argv) {
    long r = fib(argc > 1 ? atol(argv[1]) : 20);
    printf("calls=%ld result=%ld\n", calls, r);
    return 0;
}
