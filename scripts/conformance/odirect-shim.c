/* LD_PRELOAD shim for the fsx O_DIRECT variant: fsx (the Rust fsx on crates.io) has no
 * O_DIRECT option, so this adds O_DIRECT to every open of the one path named by
 * FSX_ODIRECT_PATH and leaves every other open untouched. fsx's buffers are not aligned
 * (O_DIRECT needs aligned memory on most file systems), so pread/pwrite on an O_DIRECT
 * descriptor go through an aligned bounce buffer: the kernel still sees O_DIRECT requests
 * at fsx's offsets and lengths (4 KiB aligned by fsx-odirect.toml). Built by
 * scripts/fs-conformance.sh with the system C compiler. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define DIRECT_ALIGN 4096

static int wants_direct(const char *path)
{
    const char *target = getenv("FSX_ODIRECT_PATH");
    return target != NULL && path != NULL && strcmp(path, target) == 0;
}

/* The mode argument is only read when O_CREAT or O_TMPFILE is set, as open(2) does. */
static mode_t mode_arg(int flags, va_list ap)
{
    if ((flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE)
        return (mode_t)va_arg(ap, int);
    return 0;
}

#define WRAP_OPEN(name)                                                      \
    int name(const char *path, int flags, ...)                               \
    {                                                                        \
        static int (*real)(const char *, int, ...);                          \
        va_list ap;                                                          \
        va_start(ap, flags);                                                 \
        mode_t mode = mode_arg(flags, ap);                                   \
        va_end(ap);                                                          \
        if (real == NULL)                                                    \
            real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name); \
        if (wants_direct(path))                                              \
            flags |= O_DIRECT;                                               \
        return real(path, flags, mode);                                      \
    }

#define WRAP_OPENAT(name)                                                         \
    int name(int dirfd, const char *path, int flags, ...)                         \
    {                                                                             \
        static int (*real)(int, const char *, int, ...);                          \
        va_list ap;                                                               \
        va_start(ap, flags);                                                      \
        mode_t mode = mode_arg(flags, ap);                                        \
        va_end(ap);                                                               \
        if (real == NULL)                                                         \
            real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name); \
        if (wants_direct(path))                                                   \
            flags |= O_DIRECT;                                                    \
        return real(dirfd, path, flags, mode);                                    \
    }

WRAP_OPEN(open)
WRAP_OPEN(open64)
WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)

static int is_direct(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl != -1 && (fl & O_DIRECT);
}

#define WRAP_PREAD(name)                                                           \
    ssize_t name(int fd, void *buf, size_t count, off_t offset)                    \
    {                                                                              \
        static ssize_t (*real)(int, void *, size_t, off_t);                        \
        if (real == NULL)                                                          \
            real = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, #name); \
        if (((uintptr_t)buf % DIRECT_ALIGN) == 0 || !is_direct(fd))                \
            return real(fd, buf, count, offset);                                   \
        void *bounce;                                                              \
        if (posix_memalign(&bounce, DIRECT_ALIGN, count ? count : 1) != 0)         \
            return -1;                                                             \
        ssize_t n = real(fd, bounce, count, offset);                               \
        if (n > 0)                                                                 \
            memcpy(buf, bounce, (size_t)n);                                        \
        free(bounce);                                                              \
        return n;                                                                  \
    }

#define WRAP_PWRITE(name)                                                                \
    ssize_t name(int fd, const void *buf, size_t count, off_t offset)                    \
    {                                                                                    \
        static ssize_t (*real)(int, const void *, size_t, off_t);                        \
        if (real == NULL)                                                                \
            real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, #name); \
        if (((uintptr_t)buf % DIRECT_ALIGN) == 0 || !is_direct(fd))                      \
            return real(fd, buf, count, offset);                                         \
        void *bounce;                                                                    \
        if (posix_memalign(&bounce, DIRECT_ALIGN, count ? count : 1) != 0)               \
            return -1;                                                                   \
        memcpy(bounce, buf, count);                                                      \
        ssize_t n = real(fd, bounce, count, offset);                                     \
        free(bounce);                                                                    \
        return n;                                                                        \
    }

WRAP_PREAD(pread)
WRAP_PREAD(pread64)
WRAP_PWRITE(pwrite)
WRAP_PWRITE(pwrite64)
