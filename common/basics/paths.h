// defines: make_dirs() (mkdir -p), this_program() and program_beside() (a program next to this one).
#pragma once
#include <string>

namespace ddp {

// mkdir -p; UsageError naming the folder when it cannot.
void make_dirs(const std::string& dir);

// This program's own path (from /proc/self/exe).
std::string this_program();

// `name` in the folder this program runs from: the chapters find each other there
// (05_ddp finds 02_spawn, 06_slurm finds 05_ddp), wherever the build folder is.
std::string program_beside(const std::string& name);

}  // namespace ddp
