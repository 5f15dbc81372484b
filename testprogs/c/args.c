// Functions whose arguments and return values `record -A`/`-R` record (tests/args.rs): integers,
// strings (one dangling, one NULL, one that ends where its mapping ends), a double, a seventh
// argument passed on the stack, and a string returned.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

// Written by every function: no call is left out as having no effect.
volatile long sink;

__attribute__((noinline)) long add(long a, long b) { sink = a; return a + b; }

__attribute__((noinline)) int say(const char *s, int n) {
  sink = n;
  int len = 0;
  if (s > (const char *)0x1000)
    while (s[len]) len++;
  return len + n;
}

__attribute__((noinline)) double half(double x) { sink = 1; return x / 2; }

__attribute__((noinline)) long seven(long a, long b, long c, long d, long e, long f, long g) {
  sink = g;
  return a + b + c + d + e + f + g;
}

__attribute__((noinline)) const char *pick(int which) {
  sink = which;
  return which ? "yes" : "no";
}

int main(void) {
  long t = 0;
  for (int i = 0; i < 3; i++)
    t += add(i, -5 - i);
  t += say("hello world", 3);
  t += say((const char *)0x10, 1);  // dangling: never read by say, must not crash the tracer
  t += say(NULL, 2);
  // A string whose NUL is the last byte of a page, the next page unmapped.
  char *page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(page + 4096, 4096);
  memcpy(page + 4096 - 4, "edg", 4);
  t += say(page + 4096 - 4, 0) * 0;
  t += (long)half(3.0);
  t += seven(1, 2, 3, 4, 5, 6, 7);
  t += add(0x7fff12345678, 123456);
  t += strlen(pick(1)) + strlen(pick(0));
  printf("%ld\n", t);
  return 0;
}
