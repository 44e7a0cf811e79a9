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
//
// Note [Never lose a run]
// Only a damaged file (bad header, truncated, CRC mismatch) is skipped for the one before it.
// An intact checkpoint that this run cannot load (another --model, another optimizer, another
// data source, other parameter shapes) is not damaged: it belongs to another run. Skipping it
// as "unreadable" would train a fresh MLP over a CNN's run folder, exit 0, and its saves,
// keeping the last K, would delete the CNN's checkpoints one by one. So it is refused (UsageError,
// exit 2), naming the difference and the ways out, before anything is written. The temporary
// file of a writer that died between write and rename stays behind; the next start removes it
// when the writer ran on this host and is gone (a live writer's file stays).

// Writes ckpt-<step>.pt in `dir` (created if missing) with what `fill` puts into the archive,
// then deletes all but the newest `keep` checkpoints. Returns the path.
std::string save_checkpoint(const std::string& dir, int64_t step, int keep,
                            const std::function<void(torch::serialize::OutputArchive&)>& fill);

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string path;
};

// Tries the checkpoints in `dir` newest first: a damaged one is logged and skipped; the first
// intact one is handed to `restore`. If `restore` throws, the checkpoint is intact but not
// this run's: UsageError naming the file, the reason and the ways out (Note [Never lose a
// run]). Tensors load onto `device` (each rank's own). No intact checkpoint: std::nullopt.
std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& dir, const torch::Device& device,
                                                       const std::function<void(torch::serialize::InputArchive&)>& restore);

// One checkpoint file into `archive` (tensors onto `device`); false with `why` when it is damaged
// (bad header, truncated, CRC mismatch) or missing. For checkpoints written as one file a rank,
// whose step is only whole when every rank's file is (chapter 07's).
bool read_checkpoint(const std::string& path, const torch::Device& device, torch::serialize::InputArchive& archive, std::string& why);

// The checkpoint files in `dir`, oldest first.
std::vector<std::string> list_checkpoints(const std::string& dir);

// Removes the temporary files (.ckpt-<step>.pt.tmp.<host>.<pid>) that writers on this host left
// when they died; another host's, or a live writer's, stay. Logs and returns the paths removed.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace ddp
