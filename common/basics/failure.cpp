// provides: exception-to-message translation and the guarded main of every program.
#include "common/basics/failure.h"

#include <c10/util/Exception.h>

#include "common/basics/errors.h"
#include "common/launch/error_file.h"

namespace ddp {

std::string short_what(const std::exception& e) {
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

std::string describe(const std::exception& e) {
  std::string what = short_what(e);
  // A JoinError already names its cause (the store unreachable, a rank missing), and a SlurmError
  // is Slurm's own message: a guess added here from the words "timed out" in it would point
  // elsewhere.
  if (dynamic_cast<const JoinError*>(&e) || dynamic_cast<const SlurmError*>(&e)) return what;
  auto has = [&](const char* s) { return what.find(s) != std::string::npos; };
  if (has("Connection reset by peer") || has("Connection closed by peer") || has("Broken pipe")) {
    what += " [a peer rank exited during this operation: it crashed, was killed, or ended early; look for its own error]";
  } else if (has("Timed out") || has("timed out") || has("Timeout")) {
    what += " [a peer is alive but did not take part within --timeout: it is stuck, or skipped this collective]";
  }
  return what;
}

int guarded_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const Exit& e) {
    return e.code;
  } catch (const UsageError& e) {
    // The error file first: a launcher that stops this process right after it printed the line
    // (02_spawn stops the others when one fails) still finds the cause.
    write_error_file(e.what());
    log_error(e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    const std::string cause = describe(e);
    write_error_file(cause);
    log_error(cause);
    return kExitFailure;
  }
}

}  // namespace ddp
