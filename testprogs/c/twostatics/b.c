/* The other file's `static int helper` (see a.c). */
__attribute__((noinline)) static int helper(int x) { return x * 7 - 2; }

__attribute__((noinline)) int from_b(int x) { return helper(x); }
