// Clang's thread-safety analysis: which mutex guards a field (GUARDED_BY), which a method needs
// held (REQUIRES) or must not hold (EXCLUDES). The `thread-safety` preset builds with
// -Wthread-safety -Werror=thread-safety; other compilers see nothing. The mutex types the
// analysis knows are in common/mutex.h (std::mutex is not annotated in libstdc++).
#pragma once

#if defined(__clang__)
#define TIERPOOL_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TIERPOOL_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) TIERPOOL_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY TIERPOOL_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) TIERPOOL_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) TIERPOOL_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_AFTER(...) TIERPOOL_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) TIERPOOL_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define REQUIRES(...) TIERPOOL_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) TIERPOOL_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) TIERPOOL_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) TIERPOOL_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) TIERPOOL_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) TIERPOOL_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) TIERPOOL_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) TIERPOOL_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) TIERPOOL_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) TIERPOOL_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS TIERPOOL_THREAD_ANNOTATION(no_thread_safety_analysis)
