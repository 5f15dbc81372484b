/* Built with -O2 -fomit-frame-pointer: `main` sets up no frame pointer. */
#include <stdio.h>
int main(int argc, char **argv) { printf("%d\n", argc); return 0; }
