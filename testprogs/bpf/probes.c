/* `probes N`: calls hit(i) N times, each from probe_loop, which also fires the USDT probe
 * `ftest:tick` -- but only while the probe's semaphore is raised, as programs built with <sys/sdt.h>
 * do to skip computing the arguments when no tracer is attached. It prints `hits=N fired=M`, M the
 * ticks fired: N while a tracer holds the semaphore, 0 otherwise.
 *
 * The SDT note is written by hand (the layout of <sys/sdt.h>, which this machine lacks): owner
 * "stapsdt", type 3, then the probe's address, .stapsdt.base's, the semaphore's, provider, name and
 * the argument description. */
#include <stdio.h>
#include <stdlib.h>

/* In a section of its own, file-backed (not .bss): the kernel raises it through the file's mapping. */
unsigned short ftest_tick_semaphore __attribute__((section(".probes"), used));

#define FTEST_TICK(arg)                                                                            \
    __asm__ volatile("990: nop\n"                                                                  \
                     ".pushsection .note.stapsdt,\"\",\"note\"\n"                                  \
                     ".balign 4\n"                                                                 \
                     ".4byte 992f-991f, 994f-993f, 3\n"                                            \
                     "991: .asciz \"stapsdt\"\n"                                                   \
                     "992: .balign 4\n"                                                            \
                     "993: .8byte 990b\n"                                                          \
                     ".8byte _.stapsdt.base\n"                                                     \
                     ".8byte ftest_tick_semaphore\n"                                               \
                     ".asciz \"ftest\"\n"                                                          \
                     ".asciz \"tick\"\n"                                                           \
                     ".asciz \"-8@%0\"\n"                                                          \
                     "994: .balign 4\n"                                                            \
                     ".popsection\n"                                                               \
                     ".ifndef _.stapsdt.base\n"                                                    \
                     ".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n"       \
                     ".weak _.stapsdt.base\n"                                                      \
                     ".hidden _.stapsdt.base\n"                                                    \
                     "_.stapsdt.base: .space 1\n"                                                  \
                     ".size _.stapsdt.base, 1\n"                                                   \
                     ".popsection\n"                                                               \
                     ".endif\n"                                                                    \
                     :                                                                             \
                     : "nor"(arg))

__attribute__((noinline)) unsigned long hit(unsigned long i)
{
    __asm__ volatile("" ::: "memory");
    return i * 3;
}

__attribute__((noinline)) unsigned long probe_loop(unsigned long n, unsigned long *fired)
{
    unsigned long sum = 0;
    for (unsigned long i = 0; i < n; i++) {
        sum += hit(i);
        if (*(volatile unsigned short *)&ftest_tick_semaphore) {
            FTEST_TICK(i);
            ++*fired;
        }
    }
    return sum;
}

int main(int argc, char **argv)
{
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000, fired = 0;
    unsigned long sum = probe_loop(n, &fired);
    printf("hits=%lu fired=%lu sum=%lu\n", n, fired, sum);
    return 0;
}
