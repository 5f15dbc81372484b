/* `hits N`: calls hit() N times (a function to put a uprobe on), then prints the count. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) unsigned long hit(unsigned long i)
{
    __asm__ volatile("" ::: "memory");
    return i * 3;
}

int main(int argc, char **argv)
{
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000, sum = 0;
    for (unsigned long i = 0; i < n; i++)
        sum += hit(i);
    printf("hits=%lu sum=%lu\n", n, sum);
    return 0;
}
