// Happens-before edges that ThreadSanitizer cannot see: memory handed to another thread through
// the kernel (io_uring's submission and completion rings are written by the kernel and read
// through an uninstrumented liburing). No-ops in other builds.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TIERPOOL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TIERPOOL_TSAN 1
#endif
#endif

#ifdef TIERPOOL_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define TIERPOOL_TSAN_RELEASE(addr) __tsan_release(addr)
#define TIERPOOL_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#else
#define TIERPOOL_TSAN_RELEASE(addr) ((void)(addr))
#define TIERPOOL_TSAN_ACQUIRE(addr) ((void)(addr))
#endif
