/* A function that calls mcount without setting up a frame pointer (written in assembly: gcc and clang
 * refuse -pg with -fomit-frame-pointer), beside an ordinary -pg function: the mcount hook cannot find
 * the first one's return address, so ferrotrace leaves it untraced and says why; the second is traced.
 * `mcnofp` calls each 10 times and prints `done`. Built with gcc -pg. */
#include <stdio.h>

__asm__(".text\n"
        ".globl no_frame_pointer\n"
        ".type no_frame_pointer,@function\n"
        "no_frame_pointer:\n"
        "  call *mcount@GOTPCREL(%rip)\n"
        "  ret\n"
        ".size no_frame_pointer, .-no_frame_pointer\n");

void no_frame_pointer(void);

__attribute__((noinline)) void with_frame_pointer(void) { __asm__ volatile(""); }

int main(void) {
    for (int i = 0; i < 10; i++) {
        no_frame_pointer();
        with_frame_pointer();
    }
    printf("done\n");
    return 0;
}
