// ddp_unit_tests' main: gtest's own, plus two things a test run in one process needs.
//
// Note [One process for the unit tests]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The unit tests share one process (tests/CMakeLists.txt says why), so a crash ends them all and
// ctest sees only "SegFault": in one CI run (cuda flavour, -j2, 15 s in, about where the last test
// ends) that was all it said, and 43 runs here (alone, up to six at a time, beside a busy core)
// never crashed.
//  1. A crash names itself: a fatal signal prints the test that was running (or that none was,
//     after the last) and the stack, then ends the process with that signal, as before, so that
//     ctest still reports the crash.
//  2. It leaves as every program of the course leaves (Note [Leaving without LibTorch's
//     destructors], common/basics/cli.cpp): once gtest has printed its summary, through
//     ddp::leave_now() with gtest's result. LibTorch's static destructors, run by exit() while
//     threads it started may still be alive, test nothing of ours.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/basics/cli.h"

namespace {

char current_test[512] = "(before the first test)";  // written outside the handler, read inside it

void say(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }

void on_fatal_signal(int sig) {
  say("\n*** ddp_unit_tests: fatal signal ");
  say(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : "SIGABRT");
  say(" in ");
  say(current_test);
  say("; stack:\n");
  void* frames[64];
  ::backtrace_symbols_fd(frames, ::backtrace(frames, 64), STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

struct NameTheRunningTest : testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo& t) override {
    std::snprintf(current_test, sizeof current_test, "test %s.%s", t.test_suite_name(), t.name());
    // UnitTests.ACrashNamesItsTestAndItsStack plants one, to see the report above.
    if (std::getenv("DDP_UNIT_PLANT_CRASH")) std::raise(SIGSEGV);
  }
  void OnTestEnd(const testing::TestInfo& t) override {
    std::snprintf(current_test, sizeof current_test, "no test (after %s.%s)", t.test_suite_name(), t.name());
  }
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  void* warm[1];
  ::backtrace(warm, 1);  // loads libgcc's unwinder now: the handler must not be the first to
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_fatal_signal);
  testing::UnitTest::GetInstance()->listeners().Append(new NameTheRunningTest);
  ddp::leave_now(RUN_ALL_TESTS());
}
