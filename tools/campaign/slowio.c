// libmsslowio: the fault campaign's slow disk. Preloaded into a process
// (LD_PRELOAD), it delays that process's I/O on regular files — reads,
// writes, fsync — by the number of microseconds its control file holds
// (MS_SLOWIO_FILE; a missing file or 0: no delay). The file is read again
// at most every 100 ms, so the runner slows a datacenter's disk and
// restores it by rewriting the file. Sockets, pipes and terminals are never
// delayed. Used only by tools/campaign (docs/campaign.md).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define REAL(name) \
  (real_##name != NULL ? real_##name : (real_##name = dlsym(RTLD_NEXT, #name)))

static ssize_t (*real_read)(int, void*, size_t);
static ssize_t (*real_write)(int, const void*, size_t);
static ssize_t (*real_pread)(int, void*, size_t, off_t);
static ssize_t (*real_pwrite)(int, const void*, size_t, off_t);
static ssize_t (*real_pread64)(int, void*, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void*, size_t, off_t);
static ssize_t (*real_readv)(int, const struct iovec*, int);
static ssize_t (*real_writev)(int, const struct iovec*, int);
static ssize_t (*real_preadv)(int, const struct iovec*, int, off_t);
static ssize_t (*real_pwritev)(int, const struct iovec*, int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);

static _Atomic long delay_us;
static _Atomic long checked_ms = -1000;

static long NowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// Reads the control file again if 100 ms have passed since the last look.
static void Refresh(const char* control) {
  long now = NowMs();
  long last = atomic_load(&checked_ms);
  if (now - last < 100 || !atomic_compare_exchange_strong(&checked_ms, &last, now)) return;
  int saved = errno;  // the caller's errno is not ours to change
  int fd = open(control, O_RDONLY | O_CLOEXEC);
  long value = 0;
  if (fd >= 0) {
    char buf[32];
    ssize_t n = REAL(read)(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
      buf[n] = '\0';
      value = strtol(buf, NULL, 10);
      if (value < 0 || value > 10 * 1000 * 1000) value = 0;  // at most 10 s per call
    }
  }
  atomic_store(&delay_us, value);
  errno = saved;
}

// Sleeps the current delay if `fd` is a regular file (or, fd < 0, always).
static void MaybeSlow(int fd) {
  static const char* control;
  static _Atomic int looked;
  if (!atomic_load(&looked)) {
    control = getenv("MS_SLOWIO_FILE");
    atomic_store(&looked, 1);
  }
  if (control == NULL) return;
  Refresh(control);
  long d = atomic_load(&delay_us);
  if (d <= 0) return;
  int saved = errno;
  struct stat st;
  if (fd < 0 || (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))) {
    struct timespec ts = {d / 1000000, (d % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  errno = saved;
}

// Each wrapper: the delay, then the real call (every one's first argument
// is the file descriptor).
#define SLOW(ret, name, params, args) \
  ret name params {                   \
    MaybeSlow(fd);                    \
    return REAL(name) args;           \
  }

SLOW(ssize_t, read, (int fd, void* buf, size_t n), (fd, buf, n))
SLOW(ssize_t, write, (int fd, const void* buf, size_t n), (fd, buf, n))
SLOW(ssize_t, pread, (int fd, void* buf, size_t n, off_t at), (fd, buf, n, at))
SLOW(ssize_t, pwrite, (int fd, const void* buf, size_t n, off_t at), (fd, buf, n, at))
SLOW(ssize_t, pread64, (int fd, void* buf, size_t n, off_t at), (fd, buf, n, at))
SLOW(ssize_t, pwrite64, (int fd, const void* buf, size_t n, off_t at), (fd, buf, n, at))
SLOW(ssize_t, readv, (int fd, const struct iovec* v, int n), (fd, v, n))
SLOW(ssize_t, writev, (int fd, const struct iovec* v, int n), (fd, v, n))
SLOW(ssize_t, preadv, (int fd, const struct iovec* v, int n, off_t at), (fd, v, n, at))
SLOW(ssize_t, pwritev, (int fd, const struct iovec* v, int n, off_t at), (fd, v, n, at))
SLOW(int, fsync, (int fd), (fd))
SLOW(int, fdatasync, (int fd), (fd))
