// defines: parse_signal() and signal_name(): the signals a scheduler warns a job with, by name.
#pragma once
#include <string>

namespace ddp {

// "USR2", "SIGUSR2" or "12" -> SIGUSR2. Only signals a scheduler sends for this are accepted
// (USR1, USR2, TERM, INT, HUP; CONT is not one); anything else is a UsageError.
int parse_signal(const std::string& name);
std::string signal_name(int sig);  // SIGUSR2 -> "SIGUSR2"

}  // namespace ddp
