// provides: RunOutput and Progress: console, per-rank log files, JSON lines and TensorBoard.
#include "05_ddp/trainer/metrics.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/basics/paths.h"
#include "common/launch/error_file.h"
#include "common/observe/trace.h"

namespace ddp {

std::string percent(double fraction) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f%%", 100 * fraction);
  return b;
}

RunOutput::RunOutput(const std::string& folder, Group& group, const torch::Device& device)
    : RunOutput(folder, group.rank(), claim_run_folder(folder, group, device)) {}

RunOutput::RunOutput(const std::string& folder, int rank) : RunOutput(folder, rank, RunLock()) {}

RunOutput::RunOutput(const std::string& folder, int rank, RunLock lock)
    : dir(folder), checkpoints(folder + "/checkpoints"), lock_(std::move(lock)), rank_(rank) {
  make_dirs(dir);
  set_log_file(dir + "/rank" + std::to_string(rank) + ".log");
  if (!lock_.took_over.empty()) log(lock_.took_over);
  if (rank != 0) return;
  const std::string jsonl = dir + "/metrics.jsonl";
  jsonl_ = std::fopen(jsonl.c_str(), "a");  // appended: a resumed run continues the same file
  if (!jsonl_) throw UsageError("cannot open " + jsonl + ": " + std::strerror(errno));
  tb_ = std::make_unique<TensorBoardWriter>(dir + "/tensorboard");
}

RunOutput::~RunOutput() {
  if (jsonl_) std::fclose(jsonl_);
}

void RunOutput::append_line(const nlohmann::ordered_json& record) {
  std::fputs((record.dump() + "\n").c_str(), jsonl_);
  std::fflush(jsonl_);
}

void RunOutput::training(int64_t step, int64_t epoch, double loss, double lr, double samples_per_s) {
  if (rank_ != 0) return;
  append_line({{"kind", "train"}, {"step", step}, {"epoch", epoch}, {"loss", loss}, {"lr", lr}, {"samples_per_s", samples_per_s}});
  tb_->add_scalar("train/loss", loss, step);
  tb_->add_scalar("train/learning_rate", lr, step);
  tb_->add_scalar("train/samples_per_s", samples_per_s, step);
  tb_->flush();
}

void RunOutput::validation(const Evaluation& e, int64_t step) {
  char line[160];
  std::snprintf(line, sizeof(line), "validation after step %lld: loss %.4f, accuracy %s (%lld images)",
                static_cast<long long>(step), e.loss, percent(e.accuracy).c_str(), static_cast<long long>(e.images));
  log0(line);
  if (rank_ != 0) return;
  // Numbers as they are (JSON's shortest exact form): the tests compare them across world sizes.
  append_line({{"kind", "validation"}, {"step", step}, {"loss", e.loss}, {"accuracy", e.accuracy}, {"images", e.images}});
  tb_->add_scalar("validation/loss", e.loss, step);
  tb_->add_scalar("validation/accuracy", e.accuracy, step);
  tb_->flush();
}

Progress::Progress(RunOutput& out, int64_t total_steps, int64_t steps_per_epoch, int epochs, int64_t samples_per_step, int every)
    : out_(out), total_(total_steps), per_epoch_(steps_per_epoch), samples_per_step_(samples_per_step), epochs_(epochs), every_(every) {}

void Progress::step_done(int64_t step, const torch::Tensor& loss, double lr) {
  // --trace: the step's number, counted from 1 as on this console, so that trace_merge --text
  // --step N draws the step N printed here, also when the run resumed from a checkpoint.
  if (trace().on()) trace().instant("step done", "train", wall_us(), Trace::kCompute, {{"step", step + 1}});
  const bool print = (step + 1) % every_ == 0 || step + 1 == total_;
  // See Note [The data path on a GPU]: reading a GPU value waits for the GPU to catch up.
  auto check = [&](double value, const char* when) {
    if (std::isfinite(value)) return;
    throw std::runtime_error("the loss is " + std::to_string(value) + " " + when + " step " + std::to_string(step) +
                             " (learning rate " + std::to_string(lr) + "): training diverged; lower --lr or add --warmup-steps");
  };
  if (loss.is_cuda()) {
    device_sum_ = device_sum_.defined() ? device_sum_ + loss : loss.clone();
    if (print) {
      loss_sum_ = device_sum_.item<double>();
      device_sum_ = torch::Tensor();
      check(loss_sum_, "by");
    }
  } else {
    const double value = loss.item<double>();
    check(value, "at");
    loss_sum_ += value;
  }
  // The clock starts when the first step is done on the device too, as the Python peer's does
  // (bench/python_ddp.py): one wait for the GPU, once.
  if (first_done_ < 0) finish_queued_steps();
  const double now = monotonic_seconds();
  ++steps_since_;
  if (first_done_ < 0) first_done_ = now;
  last_done_ = now;
  paused_before_last_ = paused_;
  ++timed_steps_;
  if (since_ < 0) {  // the clock starts after the first step, which also pays for warming up
    since_ = now;
    untimed_ = 1;
  }
  if (!print) return;
  const double busy = now - since_ - paused_since_line_;
  const double rate = busy > 0 ? static_cast<double>((steps_since_ - untimed_) * samples_per_step_) / busy : 0;
  const double mean_loss = loss_sum_ / steps_since_;
  out_.training(step + 1, step / per_epoch_, mean_loss, lr, rate);
  const double eta = rate > 0 ? static_cast<double>((total_ - step - 1) * samples_per_step_) / rate : 0;
  const int width = 10, filled = static_cast<int>(width * (step % per_epoch_ + 1) / per_epoch_);
  char line[200];
  std::snprintf(line, sizeof(line), "epoch %lld/%d [%s%s] step %lld/%lld mean loss %.4f lr %.4g %.0f samples/s ETA %d:%02d",
                static_cast<long long>(step / per_epoch_ + 1), epochs_, std::string(filled, '#').c_str(),
                std::string(width - filled, '.').c_str(), static_cast<long long>(step + 1), static_cast<long long>(total_),
                mean_loss, lr, rate, static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  log0(line);
  since_ = now, loss_sum_ = 0, steps_since_ = 0, untimed_ = 0, paused_since_line_ = 0;
}

void Progress::finish_queued_steps() {
  if (device_sum_.defined()) (void)device_sum_.item<double>();  // reading it waits for the steps behind it
}

Progress::Pause::Pause(Progress& p) : p_(p) {
  p_.finish_queued_steps();  // the GPU's queued steps are training
  start_ = monotonic_seconds();
}

Progress::Pause::~Pause() {
  if (p_.first_done_ < 0) return;  // before the clock started
  const double paused = monotonic_seconds() - start_;
  p_.paused_ += paused;
  p_.paused_since_line_ += paused;
}

void Progress::summary() const {
  // From the end of the first step to the end of the last, less the pauses in between (the
  // validation and checkpoint after the last step came later: subtracting them too had a
  // resumed run of 50 steps report twice its real rate).
  const double busy = last_done_ - first_done_ - paused_before_last_;
  if (timed_steps_ < 1 || busy <= 0) return;
  char line[160];
  std::snprintf(line, sizeof(line), "throughput: %.1f samples/s over %lld steps (all ranks; the first step left out)",
                static_cast<double>(timed_steps_ * samples_per_step_) / busy,
                static_cast<long long>(timed_steps_));
  log0(line);
}

}  // namespace ddp
