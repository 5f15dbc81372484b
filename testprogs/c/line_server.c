/* A line-protocol server for `record -p` (the C twin of testprogs/src/bin/line_server.rs): listens on
 * 127.0.0.1 (an ephemeral port, printed as `port=N`), answers each line of a connection with
 * handle(LINE), one connection at a time. Built with gcc -pg -mnop-mcount -mrecord-mcount. With
 * LINE_SERVER_DLOPEN=LIB it first dlopens LIB (tests/attach.rs: a library that uses up static TLS). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

__attribute__((noinline)) void handle(const char *line, char *out, size_t cap) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *p = line; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    snprintf(out, cap, "%s %016llx\n", line, (unsigned long long)h);
}

int main(void) {
    const char *lib = getenv("LINE_SERVER_DLOPEN");
    if (lib && !dlopen(lib, RTLD_NOW)) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 16)) return 1;
    socklen_t len = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &len);
    printf("port=%d\n", ntohs(a.sin_port));
    fflush(stdout);
    for (;;) {
        int c = accept(s, 0, 0);
        if (c < 0) continue;
        FILE *in = fdopen(c, "r");
        char line[4096], out[4200];
        while (fgets(line, sizeof line, in)) {
            line[strcspn(line, "\n")] = 0;
            handle(line, out, sizeof out);
            if (write(c, out, strlen(out)) < 0) break;
        }
        fclose(in);
    }
}
