/*
 * For tests/cli/musl_test.ts only: lets Debian's glibc-built libstdc++.so.6 and libgcc_s.so.1 load under
 * Debian's musl loader, the way Alpine's gcompat does for glibc programs. Alpine ships a musl-built
 * libstdc++ (apk add libstdc++), Debian does not, and the musl build of edgeproxy (Bun's runtime) needs
 * one. Built with musl-gcc as "ld-linux-x86-64.so.2", the name those libraries ask for; it defines the
 * glibc-only symbols they reference and musl lacks. Everything else, libc included, is musl's.
 */
#include <locale.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/random.h>
#include <time.h>

char __libc_single_threaded = 0;

extern int __cxa_atexit(void (*)(void *), void *, void *);

/* thread_local destructors: run at exit instead of at thread exit (Bun's threads live as long as it). */
int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj, void *dso) {
  return __cxa_atexit(fn, obj, dso);
}

uint32_t arc4random(void) {
  uint32_t v = 0;
  while (getrandom(&v, sizeof v, 0) != sizeof v) {
  }
  return v;
}

size_t __strftime_l(char *s, size_t n, const char *f, const struct tm *tm, locale_t l) {
  return strftime_l(s, n, f, tm, l);
}

/* "Not found": libgcc's unwinder then falls back to dl_iterate_phdr, which musl has. */
int _dl_find_object(void *pc, void *result) {
  (void)pc;
  (void)result;
  return -1;
}

/* CPU feature probing of libgcc's multiversioned functions: report no extra features. */
void __cpu_indicator_init(void) {}
struct {
  unsigned int vendor, type, subtype, features[1];
} __cpu_model;
