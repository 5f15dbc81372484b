/* A block allocated before recording starts, freed while recorded, for `ferrotrace record --alloc`.
 *
 * Built with -DLIBRARY -shared -fPIC it is libearlyfree.so, whose constructor allocates 1234 bytes
 * while the dynamic loader initialises the program's libraries: before the preloaded runtime starts
 * recording. The program, linked to it, frees that block and a block of its own, and prints the
 * early block's address (`early=0x...`).
 */
#include <stdio.h>
#include <stdlib.h>

#ifdef LIBRARY
void *early_block;

__attribute__((constructor)) static void allocate_early(void) { early_block = malloc(1234); }
#else
extern void *early_block;

int main(void) {
    printf("early=%p\n", early_block);
    free(early_block);
    void *volatile own = malloc(10);
    free(own);
    return 0;
}
#endif
