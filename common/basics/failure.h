// defines: guarded_main() (exceptions -> message with rank and host -> exit code), DDP_CHECK, describe().
#pragma once
#include <exception>
#include <functional>
#include <sstream>
#include <string>

#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ddp {

// The exception's message without LibTorch's C++ backtrace.
std::string short_what(const std::exception& e);

// short_what() plus what it usually means in a distributed run ("Connection reset by peer":
// another rank died).
std::string describe(const std::exception& e);

// Thrown to end the program with `code` from deep inside a run, destructors running on the way
// out: what Python's sys.exit(code) does by raising SystemExit. guarded_main() returns `code`.
struct Exit {
  int code;
};

// Runs a program body: Exit -> its code, UsageError -> exit 2, anything else -> exit 1, each
// error with one line that names rank, host and cause. Under a launcher the cause also goes to the error file it named
// (TORCHELASTIC_ERROR_FILE: torchrun and 02_spawn), so the launcher can say who failed and why.
int guarded_main(const std::function<int()>& body);

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ddp

// A failed check names file and line; guarded_main() adds rank and host.
#define DDP_CHECK(cond, msg)                                                                         \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::ostringstream ddp_check_os_;                                                              \
      ddp_check_os_ << "check failed at " << __FILE__ << ":" << __LINE__ << ": " #cond ": " << msg; \
      throw ::ddp::CheckFailed(ddp_check_os_.str());                                                 \
    }                                                                                                \
  } while (0)
