/* A program with frame pointers whose hot function borrows %rbp for a pointer to text, as code built
 * without frame pointers may: a frame-pointer walk started there reads the text as a return address. */
static char text[64] = "/usr/local/share/junk/text/read/as/return/addresses/by/fp/walks";

__attribute__((noinline)) long spin(long n)
{
    long r;
    __asm__ volatile("push %%rbp\n\t"
                     "mov %2, %%rbp\n\t"
                     "1: dec %0\n\t"
                     "jnz 1b\n\t"
                     "pop %%rbp\n\t"
                     : "=r"(r)
                     : "0"(n), "r"(text)
                     : "memory");
    return r;
}

int main(void)
{
    long s = 0;
    for (int i = 0; i < 30; i++)
        s += spin(20000000);
    return (int)s;
}
