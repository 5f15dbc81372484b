/* Built with gcc -pg -mfentry (build.rs): every function calls __fentry__ first, which
 * ferrotrace-embedded provides. Counts its own calls, like the Rust fib. */
unsigned long cfib_calls;

__attribute__((noinline)) unsigned long cfib(unsigned n) {
    cfib_calls++;
    if (n < 2)
        return n;
    unsigned long a = cfib(n - 1);
    unsigned long b = cfib(n - 2);
    __asm__ volatile("" : "+r"(a), "+r"(b)); /* keep both calls real calls */
    return a + b;
}
