// What publishing a file only once complete costs the kernel, per file (docs/performance.md,
// "What 'complete or not at all' costs per file"). Creates DIRS x PER files of 4 KiB under ROOT,
// one thread, one of three ways:
//  0: open(O_CREAT|O_EXCL) + pwrite + futimens + close            (tar's way)
//  1: open(O_TMPFILE) + pwrite + futimens + linkat(AT_EMPTY_PATH) + close (sprat's way)
//  2: open(".name.tmp", O_CREAT|O_EXCL) + pwrite + futimens + close + renameat  (rsync's way)
//  3: open(O_CREAT|O_EXCL) + pwrite + close, no mtime            (`sprat bench write`, the write limit)
//
//   gcc -O2 -o /tmp/publish bench/micro/publish.c
//   /tmp/publish ROOT MODE DIRS PER      (ROOT must not exist; run each mode on a fresh file system)
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s ROOT MODE(0|1|2|3) DIRS PER\n", argv[0]);
        return 2;
    }
    const char *root = argv[1]; int mode = atoi(argv[2]); int dirs = atoi(argv[3]); int per = atoi(argv[4]);
    char buf[4096]; memset(buf, 'x', sizeof buf);
    struct timespec ts[2] = {{1600000000, 0}, {1600000000, 0}};
    struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
    mkdir(root, 0755);
    int rfd = open(root, O_DIRECTORY | O_RDONLY);
    for (int d = 0; d < dirs; d++) {
        char dn[32]; snprintf(dn, sizeof dn, "d%02d", d);
        mkdirat(rfd, dn, 0755);
        int dfd = openat(rfd, dn, O_DIRECTORY | O_RDONLY);
        for (int i = 0; i < per; i++) {
            char fn[32]; snprintf(fn, sizeof fn, "f%05d", i);
            int fd;
            if (mode == 0) {
                fd = openat(dfd, fn, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                pwrite(fd, buf, 4096, 0); futimens(fd, ts); close(fd);
            } else if (mode == 1) {
                fd = openat(dfd, ".", O_WRONLY | O_TMPFILE | O_CLOEXEC, 0644);
                pwrite(fd, buf, 4096, 0); futimens(fd, ts);
                if (linkat(fd, "", dfd, fn, AT_EMPTY_PATH)) { perror("linkat"); return 1; }
                close(fd);
            } else if (mode == 3) {
                fd = openat(dfd, fn, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                pwrite(fd, buf, 4096, 0); close(fd);
            } else {
                char tn[40]; snprintf(tn, sizeof tn, ".%s.tmp", fn);
                fd = openat(dfd, tn, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                pwrite(fd, buf, 4096, 0); futimens(fd, ts); close(fd);
                renameat(dfd, tn, dfd, fn);
            }
        }
        close(dfd);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct rusage ru; getrusage(RUSAGE_SELF, &ru);
    printf("mode=%d wall=%.3f user=%.3f sys=%.3f\n", mode, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
    return 0;
}
