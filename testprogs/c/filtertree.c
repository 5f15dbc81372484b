/* `record -F/-N/-D` against uftrace's meaning (issue 20 item 16), the shape of SQLite's
 * `-F '^sqlite3Insert$' -D 2`: the filtered function is called from a few levels down and calls
 * others, which call more. Built with clang-16 -fxray-instrument for ferrotrace and gcc -pg for
 * uftrace; both must keep the same calls.
 *   main -> run -> insert x3 -> { codegen -> { emit x2 -> leaf }, lookup -> leaf, skipme -> leaf }
 *                 -> leaf (outside insert)
 */
#include <stdio.h>

static volatile long sink;

__attribute__((noinline)) void leaf(long n) { sink += n; }
__attribute__((noinline)) void emit(long n) { leaf(n); }
__attribute__((noinline)) void codegen(long n) {
    emit(n);
    emit(n + 1);
}
__attribute__((noinline)) void lookup(long n) { leaf(n); }
__attribute__((noinline)) void skipme(long n) { leaf(n); }
__attribute__((noinline)) void insert(long n) {
    codegen(n);
    lookup(n);
    skipme(n);
}
__attribute__((noinline)) void run(void) {
    for (long i = 0; i < 3; i++) insert(i);
    leaf(7);
}

int main(void) {
    run();
    printf("sink=%ld\n", sink);
    return 0;
}
