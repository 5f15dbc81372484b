/* An unprivileged user racing root's attach (tests/security.rs): in every ferrotrace-attach-*
 * directory of DIR, as fast as it can, puts a symbolic link in the place of `error` (whatever is
 * there, moved aside), `control` and `live` (the FIFOs moved aside), pointing at the root-only files
 * given. Root must never read, chown or open through them. Runs until killed.
 * Usage: attach_racer DIR ERROR-TARGET CONTROL-TARGET LIVE-TARGET */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void plant(const char *dir, const char *name, const char *target) {
    char path[PATH_MAX], aside[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return;
        snprintf(aside, sizeof aside, "%s/%s.aside", dir, name);
        rename(path, aside);
    }
    symlink(target, path);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: attach_racer DIR ERROR-TARGET CONTROL-TARGET LIVE-TARGET\n");
        return 2;
    }
    for (;;) {
        DIR *top = opendir(argv[1]);
        if (!top)
            continue;
        struct dirent *e;
        while ((e = readdir(top))) {
            if (strncmp(e->d_name, "ferrotrace-attach-", 18) != 0)
                continue;
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/%s", argv[1], e->d_name);
            plant(dir, "error", argv[2]);
            plant(dir, "control", argv[3]);
            plant(dir, "live", argv[4]);
        }
        closedir(top);
    }
}
