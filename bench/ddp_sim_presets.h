// defines: ddp_sim's network presets (cited figures of three machines), where the tool finds the
// profiles, and the table that holds the simulator against PyTorch's published DDP benchmark
// (Note [Presets: where each figure comes from], Note [The PyTorch DGX-1 table]).
#pragma once
#include <string>
#include <vector>

#include "bench/ddp_sim.h"

namespace ddp::sim {

struct Preset {
  std::string name, machine;
  double intra_gbps = 0, intra_latency_us = 0, inter_gbps = 0, inter_latency_us = 0;
  Algorithm algorithm = Algorithm::ring;
  std::vector<MeasuredAllReduce> measured;
  double interference = 0;  // Options::interference: cited, not measured here  // within one node, per GPU count (Note [Measured all-reduce tables])
};
const std::vector<Preset>& presets();
std::string preset_names();  // "dgx-v100, a100-8, h100-8"
// UsageError naming the valid presets when `name` is none of them.
const Preset& find_preset(const std::string& name);
Network network_of(const Preset& preset);
// The line the Note gives for a preset ("dgx-v100: intra 1200 Gb/s 5 us, inter 320 Gb/s 10 us, ring;
// measured in a node of 2, 4, 8 GPUs; interference 0.189").
std::string preset_line(const Preset& preset);

// bench/profiles, found upwards from the folder this program runs from (build-cpu/ sits in the
// repository); UsageError when no parent holds it.
std::string find_profiles_dir();
// <dir>/<model>.json; UsageError naming the model and the folder when there is no such file.
std::string model_profile_path(const std::string& profiles_dir, const std::string& model);

// The table of Note [The PyTorch DGX-1 table], as `ddp_sim --table pytorch-dgx1` prints it
// (Markdown); deterministic. UsageError when a profile cannot be read.
std::string pytorch_dgx1_table(const std::string& profiles_dir);
// The same cells with the slowest rank, its spread calibrated on the other model's cells (Note
// [The PyTorch DGX-1 table, held out]): `ddp_sim --table pytorch-dgx1-held-out`.
std::string pytorch_dgx1_held_out_table(const std::string& profiles_dir);

}  // namespace ddp::sim
