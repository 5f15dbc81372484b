/* Two hot functions of their own (static: no symbol once stripped): spin_a runs twice as long as
 * spin_b, ARGV[1] rounds (tests/profile_cli.rs: unsymbolized code named by its .eh_frame region). */
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void spin_a(unsigned long n) {
    for (unsigned long i = 0; i < 2 * n; i++) sink += i * 3;
}

__attribute__((noinline)) static void spin_b(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink += i * 5;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    for (long r = 0; r < rounds; r++) {
        spin_a(1000000);
        spin_b(1000000);
    }
    printf("%lu\n", sink);
    return 0;
}
