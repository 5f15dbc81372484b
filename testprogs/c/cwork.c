/* A C program built with clang -fxray-instrument: fib(n) prints its call count. */
#include <stdio.h>
#include <stdlib.h>

static unsigned long calls;

__attribute__((noinline)) unsigned long fib(unsigned long n) {
    calls++;
    if (n < 2) return n;
    unsigned long a = fib(n - 1);
    __asm__ volatile("" : "+r"(a));
    unsigned long b = fib(n - 2);
    __asm__ volatile("" : "+r"(b));
    return a + b;
}

int main(int argc, char **argv) {
    unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 15;
    unsigned long r = fib(n);
    printf("calls=%lu result=%lu\n", calls, r);
    return 0;
}
