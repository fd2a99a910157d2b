/* LD_PRELOAD shim for the fault tests: shifts CLOCK_REALTIME, and only it, by
 * the number of nanoseconds written (in decimal) in the file named by
 * $IDMINT_TEST_REALTIME_OFFSET_FILE, read afresh on every call, so a test can
 * step a running process's wall clock back or forward while its monotonic
 * clock runs on. Python's time.time_ns() and time.time() call clock_gettime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);

static long long offset_ns(void) {
    const char *path = getenv("IDMINT_TEST_REALTIME_OFFSET_FILE");
    char text[32] = {0};
    int fd;
    if (path == NULL || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return 0;
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    return n > 0 ? atoll(text) : 0;
}

int clock_gettime(clockid_t clock, struct timespec *now) {
    if (real_clock_gettime == NULL) {
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    }
    int result = real_clock_gettime(clock, now);
    if (result == 0 && clock == CLOCK_REALTIME) {
        long long total = (long long)now->tv_sec * 1000000000LL + now->tv_nsec + offset_ns();
        now->tv_sec = total / 1000000000LL;
        now->tv_nsec = total % 1000000000LL;
    }
    return result;
}
