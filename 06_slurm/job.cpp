// provides: JobSpec's trainer command, and the parsers of Slurm's --time and --signal values.
#include "06_slurm/job.h"

#include <cctype>

#include "common/basics/errors.h"
#include "common/slurm/preemption.h"

namespace ddp {

std::vector<std::string> JobSpec::task_command(const std::string& job_id) const {
  std::vector<std::string> cmd{trainer, "--backend", backend(), "--out", out_dir + "/" + job_id};
  if (!no_signal) cmd.insert(cmd.end(), {"--requeue-signal", signal});
  cmd.insert(cmd.end(), trainer_args.begin(), trainer_args.end());
  return cmd;
}

namespace {
long number(const std::string& text, const std::string& whole) {
  if (text.empty() || text.size() > 7) throw UsageError("--time '" + whole + "': expected M, M:S, H:M:S, D-H, D-H:M or D-H:M:S");
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      throw UsageError("--time '" + whole + "': expected M, M:S, H:M:S, D-H, D-H:M or D-H:M:S");
    }
  }
  return std::stol(text);
}
}  // namespace

int parse_slurm_time(const std::string& text) {
  long days = 0;
  std::string rest = text;
  const size_t dash = text.find('-');
  if (dash != std::string::npos) days = number(text.substr(0, dash), text), rest = text.substr(dash + 1);
  std::vector<long> parts;
  size_t start = 0;
  for (size_t colon; (colon = rest.find(':', start)) != std::string::npos; start = colon + 1) {
    parts.push_back(number(rest.substr(start, colon - start), text));
  }
  parts.push_back(number(rest.substr(start), text));
  long s = 0;
  if (dash != std::string::npos) {  // D-H, D-H:M, D-H:M:S
    if (parts.size() > 3) throw UsageError("--time '" + text + "': too many fields");
    const long mult[] = {3600, 60, 1};
    for (size_t k = 0; k < parts.size(); ++k) s += parts[k] * mult[k];
    s += days * 86400;
  } else if (parts.size() == 1) {
    s = parts[0] * 60;  // minutes
  } else if (parts.size() == 2) {
    s = parts[0] * 60 + parts[1];
  } else if (parts.size() == 3) {
    s = parts[0] * 3600 + parts[1] * 60 + parts[2];
  } else {
    throw UsageError("--time '" + text + "': too many fields");
  }
  if (s <= 0 || s > 365L * 86400) throw UsageError("--time '" + text + "': must be more than 0 and at most a year");
  return static_cast<int>(s);
}

void parse_signal_spec(const std::string& text, JobSpec& spec) {
  if (text == "none") {
    spec.no_signal = true;
    return;
  }
  const size_t at = text.find('@');
  if (at == std::string::npos) throw UsageError("--signal '" + text + "': expected SIGNAL@SECONDS (e.g. USR2@90) or none");
  parse_signal(text.substr(0, at));  // refuses an unknown signal
  spec.signal = text.substr(0, at);
  if (spec.signal.rfind("SIG", 0) == 0) spec.signal = spec.signal.substr(3);  // sbatch wants USR2
  const std::string secs = text.substr(at + 1);
  if (secs.empty() || secs.size() > 5 || secs.find_first_not_of("0123456789") != std::string::npos) {
    throw UsageError("--signal '" + text + "': the seconds after @ must be a number (at most 65535, Slurm's limit)");
  }
  spec.signal_before_s = std::stoi(secs);
  if (spec.signal_before_s > 65535) throw UsageError("--signal '" + text + "': at most 65535 seconds (Slurm's limit)");
  spec.no_signal = false;
}

}  // namespace ddp
