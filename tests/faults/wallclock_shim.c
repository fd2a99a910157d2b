/*
 * LD_PRELOAD shim for the fault tests: a process whose wall clock can be stepped.
 *
 * CLOCK_REALTIME (and its coarse variant), gettimeofday() and time() return the real
 * time plus an offset in nanoseconds, read as decimal text from the file named by
 * IDMINT_WALLCLOCK_OFFSET_FILE. Every other clock (CLOCK_MONOTONIC above all, which
 * sleeps and deadlines use) is left alone, as an NTP step or a VM restore would.
 *
 * The file is read at every reading of the wall clock (a few microseconds each), so a
 * new offset takes effect at the very next reading, wherever the process is. The
 * writer replaces the file whole (write elsewhere, then rename), so a reader never sees
 * half a number; when the file cannot be read the last offset read stays.
 *
 * Built by tests/faults/conftest.py with: gcc -shared -fPIC -O2 -o shim.so shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S 1000000000LL

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime_fn;
/* Shared by every thread of the process: only ever read and written whole. */
static int64_t offset_ns;

static clock_gettime_fn real_clock_gettime(void) {
    clock_gettime_fn fn = __atomic_load_n(&real_clock_gettime_fn, __ATOMIC_ACQUIRE);
    if (fn == NULL) {
        fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        __atomic_store_n(&real_clock_gettime_fn, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

static void read_offset_file(void) {
    const char *path = getenv("IDMINT_WALLCLOCK_OFFSET_FILE");
    if (path == NULL) {
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    char text[32];
    ssize_t length = read(fd, text, sizeof text - 1);
    close(fd);
    if (length <= 0) {
        return;
    }
    text[length] = '\0';
    char *end;
    long long value = strtoll(text, &end, 10);
    if (end != text) {
        __atomic_store_n(&offset_ns, (int64_t)value, __ATOMIC_RELAXED);
    }
}

static int64_t current_offset_ns(void) {
    read_offset_file();
    return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
}

static void shift(struct timespec *ts) {
    int saved_errno = errno; /* the file's open() must not leak into the caller's errno */
    int64_t shifted = (int64_t)ts->tv_sec * NS_PER_S + ts->tv_nsec + current_offset_ns();
    errno = saved_errno;
    ts->tv_sec = (time_t)(shifted / NS_PER_S);
    ts->tv_nsec = (long)(shifted % NS_PER_S);
    if (ts->tv_nsec < 0) {
        ts->tv_sec -= 1;
        ts->tv_nsec += NS_PER_S;
    }
}

int clock_gettime(clockid_t clock_id, struct timespec *ts) {
    int status = real_clock_gettime()(clock_id, ts);
    if (status == 0 && (clock_id == CLOCK_REALTIME || clock_id == CLOCK_REALTIME_COARSE)) {
        shift(ts);
    }
    return status;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz; /* obsolete: Linux fills it with zeros at most */
    struct timespec ts;
    int status = clock_gettime(CLOCK_REALTIME, &ts);
    if (status == 0) { /* glibc declares tv non-null */
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return status;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
