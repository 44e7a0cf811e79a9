// defines: log(), log0(), log_error(): every line carries who wrote it ("[rank 1/4] ...").
#pragma once
#include <string>

namespace ddp {

// Who this process is, for the prefix of every line. Until the rank is known it is the
// program's role ("launcher", "rank ?/?").
void set_log_identity(int rank, int world_size);
void set_log_identity(const std::string& tag);
// A tag, and whether this process prints log0()'s lines: chapter 08's replica ranks do not (the
// bucket lines of the DDP class inside a replica group are chapter 05's lesson, not 08's).
void set_log_identity(const std::string& tag, bool prints_log0);

// From now on every line (log, log0 on rank 0, log_error) also goes to this file, appended:
// one file per rank keeps each rank's story when the console shows only rank 0.
void set_log_file(const std::string& path);

// One line to stdout, written with a single write() so lines of different ranks never mix.
void log(const std::string& msg);
// Only rank 0 prints: keeps an N-rank console readable.
void log0(const std::string& msg);
// To stderr, with host and pid: an error must say where it happened.
void log_error(const std::string& msg);

}  // namespace ddp

namespace ddp {
// "2s", "2.5s", "0.125s": seconds for humans.
std::string seconds(double s);
}  // namespace ddp
