/* `clocks N`: reads CLOCK_MONOTONIC N times (in the vDSO: no system call), then prints a checksum. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) static unsigned long read_clocks(unsigned long n)
{
    struct timespec ts;
    unsigned long sum = 0;
    for (unsigned long i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        sum += (unsigned long)ts.tv_nsec;
    }
    return sum;
}

int main(int argc, char **argv)
{
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000000;
    printf("clocks=%lu sum=%lu\n", n, read_clocks(n) & 0xffff);
    return 0;
}
