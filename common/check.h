// CHECK macros for programmer errors (broken invariants), never for bad input:
// a failed CHECK logs where and why, then aborts.
#pragma once

#include <sstream>

namespace tokenmill::internal {

// Collects the streamed message and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `TM_CHECK(x) << "..."` compile to nothing when x holds.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace tokenmill::internal

#define TM_CHECK(condition)                     \
  (condition) ? (void)0                         \
              : ::tokenmill::internal::Voidify() &     \
                    ::tokenmill::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define TM_CHECK_EQ(a, b) TM_CHECK((a) == (b)) << "(" << (a) << " vs " << (b) << ") "
#define TM_CHECK_NE(a, b) TM_CHECK((a) != (b)) << "(" << (a) << " vs " << (b) << ") "
#define TM_CHECK_LT(a, b) TM_CHECK((a) < (b)) << "(" << (a) << " vs " << (b) << ") "
#define TM_CHECK_LE(a, b) TM_CHECK((a) <= (b)) << "(" << (a) << " vs " << (b) << ") "
#define TM_CHECK_GT(a, b) TM_CHECK((a) > (b)) << "(" << (a) << " vs " << (b) << ") "
#define TM_CHECK_GE(a, b) TM_CHECK((a) >= (b)) << "(" << (a) << " vs " << (b) << ") "

#ifdef NDEBUG
#define TM_DCHECK(condition) \
  while (false) TM_CHECK(condition)
#else
#define TM_DCHECK(condition) TM_CHECK(condition)
#endif
