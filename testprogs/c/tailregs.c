// Indirect tail calls through every register that can carry one, with every argument register live.
//
// An XRay TAIL sled sits right before a function's tail jump, so whatever the jump needs is live when
// the sled's trampoline runs: the callee's arguments (rdi, rsi, rdx, rcx, r8, r9, al for varargs,
// xmm0-7) and the register that holds the target of an indirect tail call, which LLVM takes from its
// tail-call class (rax, rcx, rdx, rsi, rdi, r8, r9, r11). Each `via_REG` below pins the target into REG
// (an explicit register variable fed through an empty asm) and passes as many integer arguments as the
// other argument registers allow, plus eight doubles; the callee checks every argument it receives.
// The test that builds this file checks with objdump that each `via_REG` really ends in `jmp *%REG`.
//
// Prints one line per register and "ok N" when every call came back right (exit status 1 otherwise).
// Build: clang-16 -O2 -fxray-instrument -fxray-instruction-threshold=1
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef long (*target_fn)();

static long bad;

#define DOUBLES double x0, double x1, double x2, double x3, double x4, double x5, double x6, double x7
#define PASS_DOUBLES x0, x1, x2, x3, x4, x5, x6, x7

// The callee: checks the integer arguments it was given (n of them, the rest are 0) and the doubles,
// and returns a checksum that depends on all of them.
__attribute__((noinline)) static long check(const char *via, int n, long a, long b, long c, long d, long e,
                                            long f, DOUBLES) {
    long ints[6] = {a, b, c, d, e, f};
    double ds[8] = {PASS_DOUBLES};
    long sum = 0;
    for (int i = 0; i < 6; i++) {
        long want = i < n ? 1000 + i : 0;
        if (ints[i] != want) {
            fprintf(stderr, "%s: integer argument %d is %ld, expected %ld\n", via, i, ints[i], want);
            bad++;
        }
        sum = sum * 31 + ints[i];
    }
    for (int i = 0; i < 8; i++) {
        if (ds[i] != 0.5 + i) {
            fprintf(stderr, "%s: double argument %d is %g, expected %g\n", via, i, ds[i], 0.5 + i);
            bad++;
        }
        sum = sum * 31 + (long)(ds[i] * 2);
    }
    return sum;
}

__attribute__((noinline)) long t0(DOUBLES) { return check("rdi", 0, 0, 0, 0, 0, 0, 0, PASS_DOUBLES); }
__attribute__((noinline)) long t1(long a, DOUBLES) { return check("rsi", 1, a, 0, 0, 0, 0, 0, PASS_DOUBLES); }
__attribute__((noinline)) long t2(long a, long b, DOUBLES) {
    return check("rdx", 2, a, b, 0, 0, 0, 0, PASS_DOUBLES);
}
__attribute__((noinline)) long t3(long a, long b, long c, DOUBLES) {
    return check("rcx", 3, a, b, c, 0, 0, 0, PASS_DOUBLES);
}
__attribute__((noinline)) long t4(long a, long b, long c, long d, DOUBLES) {
    return check("r8", 4, a, b, c, d, 0, 0, PASS_DOUBLES);
}
__attribute__((noinline)) long t5(long a, long b, long c, long d, long e, DOUBLES) {
    return check("r9", 5, a, b, c, d, e, 0, PASS_DOUBLES);
}
__attribute__((noinline)) long t6(long a, long b, long c, long d, long e, long f, DOUBLES) {
    return check("six", 6, a, b, c, d, e, f, PASS_DOUBLES);
}
// Varargs: al (the count of vector registers used) is live too, next to all six integer registers.
__attribute__((noinline)) long tv(long a, long b, long c, long d, long e, long f, ...) {
    va_list ap;
    va_start(ap, f);
    double ds[8];
    for (int i = 0; i < 8; i++) ds[i] = va_arg(ap, double);
    va_end(ap);
    return check("varargs", 6, a, b, c, d, e, f, ds[0], ds[1], ds[2], ds[3], ds[4], ds[5], ds[6], ds[7]);
}

// Opaque to the optimiser: the targets are read through a volatile table, so every call is indirect.
static target_fn volatile targets[] = {(target_fn)t0, (target_fn)t1, (target_fn)t2, (target_fn)t3,
                                       (target_fn)t4, (target_fn)t5, (target_fn)t6, (target_fn)tv};

#define PIN(reg)                                                                                       \
    register target_fn fp __asm__(reg) = targets[which];                                               \
    __asm__ volatile("" : "+r"(fp))

__attribute__((noinline)) long via_rdi(int which, DOUBLES) {
    PIN("rdi");
    return ((long (*)(DOUBLES))fp)(PASS_DOUBLES);
}
__attribute__((noinline)) long via_rsi(int which, long a, DOUBLES) {
    PIN("rsi");
    return ((long (*)(long, DOUBLES))fp)(a, PASS_DOUBLES);
}
__attribute__((noinline)) long via_rdx(int which, long a, long b, DOUBLES) {
    PIN("rdx");
    return ((long (*)(long, long, DOUBLES))fp)(a, b, PASS_DOUBLES);
}
__attribute__((noinline)) long via_rcx(int which, long a, long b, long c, DOUBLES) {
    PIN("rcx");
    return ((long (*)(long, long, long, DOUBLES))fp)(a, b, c, PASS_DOUBLES);
}
__attribute__((noinline)) long via_r8(int which, long a, long b, long c, long d, DOUBLES) {
    PIN("r8");
    return ((long (*)(long, long, long, long, DOUBLES))fp)(a, b, c, d, PASS_DOUBLES);
}
__attribute__((noinline)) long via_r9(int which, long a, long b, long c, long d, long e, DOUBLES) {
    PIN("r9");
    return ((long (*)(long, long, long, long, long, DOUBLES))fp)(a, b, c, d, e, PASS_DOUBLES);
}
__attribute__((noinline)) long via_rax(int which, long a, long b, long c, long d, long e, long f, DOUBLES) {
    PIN("rax");
    return ((long (*)(long, long, long, long, long, long, DOUBLES))fp)(a, b, c, d, e, f, PASS_DOUBLES);
}
__attribute__((noinline)) long via_r11(int which, long a, long b, long c, long d, long e, long f, DOUBLES) {
    PIN("r11");
    return ((long (*)(long, long, long, long, long, long, DOUBLES))fp)(a, b, c, d, e, f, PASS_DOUBLES);
}
// No pinning: with six integer arguments and al live, the compiler's own choice is r11 (what SQLite's
// vdbeCompareMemString does).
__attribute__((noinline)) long via_varargs(int which, long a, long b, long c, long d, long e, long f, DOUBLES) {
    return ((long (*)(long, long, long, long, long, long, ...))targets[which])(a, b, c, d, e, f, PASS_DOUBLES);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    long total = 0;
    for (int r = 0; r < rounds; r++) {
        total += via_rdi(0, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
        total += via_rsi(1, 1000, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
        total += via_rdx(2, 1000, 1001, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
        total += via_rcx(3, 1000, 1001, 1002, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
        total += via_r8(4, 1000, 1001, 1002, 1003, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
        total += via_r9(5, 1000, 1001, 1002, 1003, 1004, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
        total += via_rax(6, 1000, 1001, 1002, 1003, 1004, 1005, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
        total += via_r11(6, 1000, 1001, 1002, 1003, 1004, 1005, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
        total += via_varargs(7, 1000, 1001, 1002, 1003, 1004, 1005, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
    }
    printf("checksum %ld\n", total);
    if (bad) {
        printf("bad %ld\n", bad);
        return 1;
    }
    printf("ok %d\n", rounds * 9);
    return 0;
}
