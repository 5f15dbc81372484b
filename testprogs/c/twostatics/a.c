/* Two files each with their own `static int helper`: two distinct functions with one name. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static int helper(int x) { return x * 3 + 1; }

__attribute__((noinline)) int from_a(int x) { return helper(x); }

int from_b(int x);

int main(int argc, char **argv) {
    int a = argc > 1 ? atoi(argv[1]) : 3, b = argc > 2 ? atoi(argv[2]) : 5, sum = 0;
    for (int i = 0; i < a; i++) sum += from_a(i);
    for (int i = 0; i < b; i++) sum += from_b(i);
    printf("a=%d b=%d sum=%d\n", a, b, sum);
    return 0;
}
