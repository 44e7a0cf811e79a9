// defines: the Python references of the parity tests (tests/*_reference.py), run by the one
// Python that tests/reference_server.py keeps, when it answers, or each by itself.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proc.h"

namespace ddp_test {

// Where ctest's fixture PythonReference.Start has the server listen: <build folder>/reference.sock.
extern const std::string kReferenceSocket;

// Asks the server to run tests/<script> with `args`; nothing when no server answers or it refuses
// (then the caller runs the script itself). `extra`: variables sent as if this process had them
// (a test of the refusal). Note [One import of torch for the parity cases].
std::optional<ProcResult> ask_reference_server(const std::string& script, const std::vector<std::string>& args,
                                               double deadline_s, const std::map<std::string, std::string>& extra = {});

// Runs a reference, `py` = {python, tests/<script>, flags...}: by the server when `served` and
// `py` sets no variables of its own, else by itself; once more if its harness hung.
ProcResult run_reference(const ProcSpec& py, bool served = false, double deadline_s = 45);

}  // namespace ddp_test
