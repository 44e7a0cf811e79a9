// The CPU kernels of every process the tests start (Note [CPU kernels and the recorded figures]
// in kernels.cpp): asked of the libraries themselves, in each kind of process, in both flavours.
#include <gtest/gtest.h>

#include <iostream>
#include <regex>
#include <set>
#include <string>

#include "common/launch/command.h"
#include "kernels.h"
#include "proc.h"

using namespace ddp_test;

namespace {

// Each library says what it runs when asked to talk: OpenBLAS once as it loads ("Core: Haswell"),
// oneDNN at its first primitive ("isa:Intel AVX2"), MKL at every call ("CNR:COMPATIBLE").
const std::map<std::string, std::string> kVerbose = {
    {"OPENBLAS_VERBOSE", "2"}, {"DNNL_VERBOSE", "1"}, {"ONEDNN_VERBOSE", "1"}, {"MKL_VERBOSE", "1"}};

// What each library prints before its kernels' name.
const std::map<std::string, std::string> kSaidAfter = {{"OpenBLAS", "Core: "}, {"oneDNN", ",isa:Intel "}, {"MKL", "CNR:"}};

// The libraries this flavour's LibTorch computes with (Note [CPU kernels and the recorded figures]).
std::set<std::string> libraries() {
#ifdef DDP_HAS_NCCL
  return {"MKL", "oneDNN"};  // PyPI's torch: MKL and oneDNN inside the wheel
#else
  return {"OpenBLAS", "oneDNN"};  // Debian's: the system's OpenBLAS, and oneDNN
#endif
}

// Every name a library gave its kernels in `out` ("Haswell" for "Core: Haswell").
std::vector<std::string> names_said(const std::string& out, const std::string& prefix) {
  std::vector<std::string> names;
  const std::regex re(prefix + "([A-Za-z0-9_.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) names.push_back((*it)[1]);
  return names;
}

// Each of this flavour's libraries spoke in `out`, and named only the kernels the test binary's
// environment chose: its pins, or what the environment had set before them.
void expect_pinned(const std::string& who, const std::string& out) {
  for (KernelPin pin : kernel_pins()) {
    pin.value = std::getenv(pin.name.c_str());
    if (!libraries().count(pin.library)) continue;
    const std::string& prefix = kSaidAfter.at(pin.library);
    const std::vector<std::string> names = names_said(out, prefix);
    EXPECT_FALSE(names.empty()) << who << ": " << pin.library << " said nothing of its kernels (" << prefix << "...)\n" << out;
    for (const std::string& n : names) {
      EXPECT_EQ(n, pin.value)
          << who << ": " << pin.library << " runs " << n << ", not " << pin.name << "=" << pin.value << " of the tests' environment";
    }
    if (!names.empty()) std::cout << who << ": " << pin.library << " runs " << names.front() << " (" << names.size() << " said so)\n";
  }
}

// A matrix product and a convolution in Python's torch: every library at work once.
const std::string kPythonCompute =
    "import torch\n"
    "torch.nn.functional.conv2d(torch.randn(2, 1, 8, 8), torch.randn(4, 1, 3, 3))\n"
    "print(float((torch.randn(64, 128) @ torch.randn(128, 32)).sum()))\n";

}  // namespace

TEST(Pinned, TheRecordedFiguresHoldOnlyOnTheRecordedKernels) {
  const std::string cpu = cpu_cannot_run_recorded_kernels();
  std::cout << "this CPU: " << (cpu.empty() ? "runs the recorded kernels" : cpu) << "\n";
  const std::string other = recorded_figures_cannot_hold({{"OPENBLAS_CORETYPE", "Sandybridge"}});
  EXPECT_NE(other.find(cpu.empty() ? "OPENBLAS_CORETYPE=Sandybridge, recorded with Haswell (OpenBLAS)" : cpu), std::string::npos) << other;
  // The names as the libraries read them, whatever their case; MKL's setting is not in the cpu
  // flavour's figures.
  EXPECT_EQ(recorded_figures_cannot_hold({{"OPENBLAS_CORETYPE", "haswell"}, {"DNNL_MAX_CPU_ISA", "avx2"}, {"MKL_CBWR", "AVX2"}}), cpu);
  EXPECT_NE(recorded_figures_cannot_hold({{"DNNL_MAX_CPU_ISA", ""}}).find(cpu.empty() ? "DNNL_MAX_CPU_ISA unset" : cpu), std::string::npos);
  // The test binary pinned its own environment before the first test, where nothing chose.
  for (const KernelPin& pin : kernel_pins()) EXPECT_NE(std::getenv(pin.name.c_str()), nullptr) << pin.name;
}

// What every test's processes inherit, seen from inside them: a chapter's launcher and its
// workers (run_all's way), a Python reference (run_all's), and a Python under a shell started
// as the README walk and the benchmarks start theirs (the test's own environment, run_command).
TEST(Pinned, KernelsReachEveryKindOfProcess) {
  const std::string dir = temp_dir();
  const ProcResult chapter = run_one({{"05_ddp", "--nproc-per-node", "2", "--model", "cnn", "--synthetic", "--train-samples", "256",
                                       "--test-samples", "64", "--batch-size", "32", "--max-steps", "2", "--timeout", "20",
                                       "--out", dir},
                                      kVerbose},
                                     90);
  std::system(("rm -rf " + dir).c_str());
  ASSERT_EQ(chapter.exit_code, 0) << chapter.output;
  expect_pinned("05_ddp (launcher and 2 workers)", chapter.output);
#ifdef DDP_REFERENCE_PYTHON
  const ProcResult python = run_one({{DDP_REFERENCE_PYTHON, "-c", kPythonCompute}, kVerbose}, 60);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  expect_pinned("the Python reference", python.output);
  std::string shell = "env";
  for (const auto& [k, v] : kVerbose) shell += " " + k + "=" + v;
  const ddp::CommandResult walked = ddp::run_command({"/bin/bash", "-c", shell + " " + DDP_REFERENCE_PYTHON + " -c '" + kPythonCompute + "'"}, 60);
  ASSERT_EQ(walked.exit_code, 0) << walked.output;
  expect_pinned("a Python under bash", walked.output);
#else
  std::cout << "no Python reference configured (DDP_REFERENCE_PYTHON): its processes not asked\n";
#endif
}

// The exercise checks and the course that scripts/run.sh runs (scripts/course.sh) run outside the
// test binaries: both pin the same (scripts/kernels.sh), from an environment where nothing is set.
TEST(Pinned, TheExerciseChecksPinTheSame) {
  const std::vector<std::string> pinnable = {"OPENBLAS_CORETYPE", "DNNL_MAX_CPU_ISA", "MKL_CBWR"};
  std::string unset = "env";
  for (const std::string& name : pinnable) unset += " -u " + name;
  for (const std::string script : {"exercises/checks/lib.sh", "scripts/course.sh"}) {
    const auto r = ddp::run_command(
        {"/bin/bash", "-c", unset + " bash -c 'source " + std::string(DDP_SOURCE_DIR) + "/" + script + " && env'"}, 30);
    ASSERT_EQ(r.exit_code, 0) << script << ": " << r.output;
    std::set<std::string> pinned;
    for (const KernelPin& pin : kernel_pins()) {
      pinned.insert(pin.name);
      EXPECT_NE(r.output.find("\n" + pin.name + "=" + pin.value + "\n"), std::string::npos) << script << ": " << pin.name << "\n" << r.output;
    }
    // And nothing beyond: where this CPU cannot run the recorded kernels, they leave them too.
    for (const std::string& name : pinnable) {
      if (!pinned.count(name)) EXPECT_EQ(r.output.find("\n" + name + "="), std::string::npos) << script << ": " << name;
    }
  }
}
