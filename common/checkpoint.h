// defines: checkpoints written atomically (temporary file, fsync, rename), kept K deep, and
// loaded newest first, skipping any that is corrupt.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>

namespace ddp {

// Note [Atomic checkpoints]
// A job can die at any instant, also while writing. So a checkpoint is written to a temporary
// file in the same folder, flushed to disk (fsync), and only then renamed to its final name
// (rename is atomic on POSIX file systems); the folder is fsync'ed too, so the new name
// survives a crash of the machine. A reader thus sees a complete old checkpoint or a complete
// new one, never half of one. The file carries its length and a CRC-32, so a checkpoint damaged
// afterwards (a full disk, a copy cut short) is refused instead of loaded as garbage.

// Writes ckpt-<step>.pt in `dir` (created if missing) with what `fill` puts into the archive,
// then deletes all but the newest `keep` checkpoints. Returns the path.
std::string save_checkpoint(const std::string& dir, int64_t step, int keep,
                            const std::function<void(torch::serialize::OutputArchive&)>& fill);

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string path;
};

// Tries the checkpoints in `dir` newest first: the first whose envelope checks and which
// `restore` accepts wins. Each refused one is logged with the reason. Tensors load onto
// `device` (each rank's own). Nothing usable: std::nullopt.
std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& dir, const torch::Device& device,
                                                       const std::function<void(torch::serialize::InputArchive&)>& restore);

// The checkpoint files in `dir`, oldest first.
std::vector<std::string> list_checkpoints(const std::string& dir);

}  // namespace ddp
