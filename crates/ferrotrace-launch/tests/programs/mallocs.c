/* Spends its time in the C library's allocator: blocks of varying sizes allocated and freed out of
 * order, so that malloc's internals (_int_malloc, _int_free, unlink_chunk...) do the work. */
#include <stdlib.h>

__attribute__((noinline)) static unsigned long churn(unsigned long rounds)
{
    void *slots[64] = {0};
    unsigned long x = 88172645463325252UL, sum = 0;
    for (unsigned long i = 0; i < rounds; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned k = x % 64;
        free(slots[k]);
        slots[k] = malloc(16 + (x >> 32) % 4000);
        sum += (unsigned long)slots[k] & 0xff;
    }
    for (unsigned k = 0; k < 64; k++)
        free(slots[k]);
    return sum;
}

int main(void) { return (int)(churn(20000000) & 1); }
