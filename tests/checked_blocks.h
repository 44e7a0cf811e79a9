// provides: compare_walked, what the README walk (test_walk.cpp) asks of a checked block it ran
// (Note [Checked examples] in test_docs.cpp).
#pragma once
#include <optional>
#include <string>

namespace ddp_test::checked {

struct Compared {
  std::string report;  // each README line missing or different, named; "" when they agree
  std::string notice;  // what was not compared and why; "" when everything was
  bool compared = true;  // false where this build cannot print the recorded lines (not build-cpu)
};

// Compares what the checked block of `page` (under `root`) whose first command is on line
// `first_command_line` printed, its commands' output in their order, run in `root` (its paths
// read as the example checkout), with the page's lines. Where the kernels are not the recorded ones, the figures are masked and
// the block runs twice more, each in a folder of its own, to show they are reproducible. Nothing
// when that line opens no checked block.
std::optional<Compared> compare_walked(const std::string& root, const std::string& page, int first_command_line,
                                       const std::string& printed);

}  // namespace ddp_test::checked
