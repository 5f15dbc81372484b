/* Allocations from plugins loaded and unloaded in turn, all built -O2 -fomit-frame-pointer.
 *
 * Built as a plugin with -DPLUGIN_FN=plug_a (or plug_b) -shared -fPIC: PLUGIN_FN(n) returns malloc(n)
 * from one call deeper. Built as the host: `plugnofp LIB_A LIB_B ROUNDS` dlopens LIB_A, calls plug_a,
 * frees, dlcloses, then the same with LIB_B (likely loaded at the address LIB_A had), ROUNDS times.
 */
#include <stdlib.h>

#ifdef PLUGIN_FN
__attribute__((noinline)) static void *plugin_inner(int n) {
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) void *PLUGIN_FN(int n) {
    void *p = plugin_inner(n + 1);
    __asm__ volatile("" ::: "memory");
    return p;
}
#else
#include <dlfcn.h>
#include <stdio.h>

__attribute__((noinline)) static void use_plugin(const char *lib, const char *sym, int n) {
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    void *(*f)(int) = (void *(*)(int))dlsym(h, sym);
    free(f(n));
    dlclose(h);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    if (argc < 4)
        return 2;
    int rounds = atoi(argv[3]);
    for (int i = 0; i < rounds; i++) {
        use_plugin(argv[1], "plug_a", 100);
        use_plugin(argv[2], "plug_b", 200);
    }
    printf("%d rounds\n", rounds);
    return 0;
}
#endif
