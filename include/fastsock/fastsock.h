/* fastsock public C API. Self-contained; compiles as C and C++.
 *
 * A program may call these when linked with -lfastsock, or find them at run time with
 * dlsym(RTLD_DEFAULT, "fastsock_transport") when it runs under the preload library.
 */
#ifndef FASTSOCK_FASTSOCK_H
#define FASTSOCK_FASTSOCK_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FASTSOCK_BUILDING_LIBRARY)
#define FASTSOCK_API __attribute__((visibility("default")))
#else
#define FASTSOCK_API
#endif

/* The library's version, e.g. "0.1.0". */
FASTSOCK_API const char* fastsock_version(void);

/* The name of the transport carrying the TCP connection on `fd` ("tcp", later "shm",
 * "verbs", ...), or NULL with errno = EBADF if `fd` is not a TCP socket fastsock tracks. */
FASTSOCK_API const char* fastsock_transport(int fd);

#ifdef __cplusplus
}
#endif

#endif /* FASTSOCK_FASTSOCK_H */
