// 08_fault_tolerance: training that goes on through a lost replica, without a restart.
//
// The lesson: chapter 03's data-parallel step, made to survive a replica that dies. A replica is
// one rank, or a group of ranks that train as chapter 05's DDP among themselves (1). Before every
// step each replica asks a lighthouse who trains this step (a quorum, 2); a new quorum gets a new
// process group (3); a replica that is behind copies the state of one that is not, over the
// network (4); every step's all-reduce ends with a vote, and a step is applied only where every
// member says its all-reduce succeeded (6). The survivors never restart: a lost replica costs a
// failed step and a new quorum. The parts live beside this file, each with its Note.
//
// Usage (one command: a lighthouse and the replicas on this machine, faults on purpose):
//   ./build-cpu/08_fault_tolerance --replicas 2
//   ./build-cpu/08_fault_tolerance --replicas 3 --inject r1:allreduce@8 --replace-after 0 --steps 100 --step-ms 50
//   ./build-cpu/08_fault_tolerance --replicas 2 --sync-every 4 [--outer-lr 0.7]  # local SGD [DiLoCo]
//   ./build-cpu/08_fault_tolerance --replicas 2 --ranks-per-replica 2  # replica groups of 2 ranks
// By hand, one terminal each (the lighthouse first; --expect 2: the first quorum waits for both):
//   ./build-cpu/08_fault_tolerance --lighthouse-only --port 29510 --expect 2
//   ./build-cpu/08_fault_tolerance --replica-id r0 --lighthouse 127.0.0.1:29510
//   ./build-cpu/08_fault_tolerance --replica-id r1 --lighthouse 127.0.0.1:29510
//
// Expected output (the second command; trimmed, the processes' lines interleave, times vary):
//   [replica r1] fault: SIGKILL to myself in allreduce of step 8 (--fault)
//   [replica r0] step 8 failed (an all-reduce or the vote): not applied anywhere; asking for a new quorum
//   [replica r0] recovered: step 8 committed 0.092s after the failure (quorum 0.004s, new group 0.027s, healing 0.000s, the step 0.061s)
//   [replica r3] quorum 3: r0 r2 r3, rank 2 of 3, a new group; healing from r0
//   [launcher] check: 3 replica(s) finished, all with params fingerprint 06eaa1f7f776293e: OK

#include <thread>

#include "08_fault_tolerance/heal.h"
#include "08_fault_tolerance/launch.h"
#include "08_fault_tolerance/local_sgd.h"
#include "08_fault_tolerance/lighthouse.h"
#include "08_fault_tolerance/options.h"
#include "08_fault_tolerance/replica_group.h"
#include "08_fault_tolerance/step_log.h"
#include "08_fault_tolerance/step_vote.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/launch/error_file.h"
#include "common/launch/net.h"
#include "05_ddp/ddp.h"

int main(int argc, char** argv) {
  ch08::Options o;
  ch08::parse_options(argc, argv, o);
  return ddp::guarded_main([&] {
    if (o.serve) return ch08::serve_lighthouse(o);         // lighthouse_main.cpp
    if (o.replicas > 0 || o.check_only) return ch08::launch(o);  // launch.cpp
    if (o.replica_id.empty()) throw ddp::UsageError("say which replica this is (--replica-id), or start them all (--replicas N)");
    const ddp::toy::TrainConfig& cfg = o.train.cfg;
    ch08::Fault fault = ch08::parse_fault(o.fault, "--fault");
    ch08::StepLog steps(o.out, o.replica_id);
    auto [host, port] = ch08::split_address(o.lighthouse, "--lighthouse");

    // 1. A replica: --ranks-per-replica processes, 05's DDP among them, the same seed everywhere. With one
    //    rank, the default, the group's lines change nothing (Note [A replica group of several ranks]).
    const int G = o.ranks_per_replica, local = ch08::fork_ranks(o);  // from here on, one rank of the group
    ddp::set_log_identity("replica " + o.replica_id + (G > 1 ? "." + std::to_string(local) : ""), false);  // no DDP bucket lines
    if (local != G - 1) fault = {};  // --fault strikes the group's last rank
    if (local > 0) steps.follow();   // the leader (local rank 0) writes the replica's step log
    fault.log = &steps;
    auto model = ddp::toy::make_model(cfg.seed);
    std::vector<torch::Tensor> params = model->parameters();
    auto optimizer = ddp::toy::make_optimizer(params, cfg);
    ddp::Group inner = ch08::inner_group(o, local);
    ddp::DistributedDataParallel ddp_model(model.ptr(), inner, ddp::kOneBucket);
    ch08::Diloco diloco = ch08::make_diloco(params, o.outer);  // --outer-lr: DiLoCo's state (Note [DiLoCo])
    ch08::ReplicaState state{params, optimizer.get(), 0, 0, diloco.outer ? &diloco : nullptr};
    if (!o.train.save_init.empty() && local == 0) ddp::toy::save_params(params, o.train.save_init);
    ch08::LighthouseClient lighthouse(host, port, o.run, o.replica_id, std::to_string(::getpid()), o.quorum_deadline_s, local == 0);

    std::string current;  // the group we hold: group_name() of its quorum
    int64_t failures = 0;
    c10::intrusive_ptr<ddp::Backend> pg;
    double failed_at = -1;  // when the last step failed: the start of a recovery
    int64_t averages = 0;   // committed all-reduces: of the gradients, the parameters (local SGD) or the pseudo-gradients (DiLoCo)
    while (state.step < cfg.steps) {
      // 2. Ask who trains this step, telling our step and whether our last one failed.
      fault.at("quorum", state.step);
      ch08::Quorum q;
      try {
        q = ch08::ask_together(inner, lighthouse, state.step, failures, o.quorum_deadline_s);  // the leader asks
      } catch (const ch08::RunEnded& e) {  // came too late: the others have finished
        ddp::log("the run ended at step " + std::to_string(e.step) + " before this replica could join: nothing to do");
        return ddp::kExitOk;
      }
      const double quorum_at = ddp::monotonic_seconds();
      const ch08::Assignment a = ch08::assignment(q, o.replica_id);
      failures = 0;

      // 3. A new quorum, a new group: on a fresh store prefix, as its id is new. The old one is
      //    dropped; a Gloo group whose collective failed cannot be used again.
      std::string said = "quorum " + std::to_string(q.id) + ":";
      for (const ch08::Member& m : q.members) said += " " + m.replica_id;
      said += ", rank " + std::to_string(a.replica_rank) + " of " + std::to_string(a.replica_world);
      const bool fresh = lighthouse.group_name(q) != current;
      if (fresh) {
        pg.reset();
        std::string why;
        try {  // local rank k joins lane k: the group of local rank k of every member
          pg = ch08::new_group(lighthouse.group_store(q, local), a.replica_rank, a.replica_world, host, o.timeout_s);
        } catch (const std::exception& e) {
          why = ddp::short_what(e);
        }
        if (!ch08::agree(inner, why.empty())) {  // a member lost while the groups formed: ask again
          ddp::log(said + ": the new group did not form (" + (why.empty() ? "another lane's" : why) + "); asking again");
          failures = 1, failed_at = failed_at < 0 ? ddp::monotonic_seconds() : failed_at;
          continue;
        }
        current = lighthouse.group_name(q);
        said += ", a new group";
      }
      const double group_at = ddp::monotonic_seconds();
      if (a.heal) said += "; healing from " + q.members[a.heal_from].replica_id;
      if (fresh || a.heal || !a.heal_to.empty()) ddp::log(said);

      // 4. Heal: a replica behind the quorum's step copies parameters, optimizer state, step and
      //    data position from a member at that step (Note [Healing from a peer]).
      bool ok = true;
      const int64_t behind = state.step;
      try {
        if (a.heal) ch08::recv_state(*pg, a.heal_from, state), steps.line("healed from " + q.members[a.heal_from].replica_id + " step " + std::to_string(state.step));
        for (int to : a.heal_to) ch08::send_state(*pg, to, state);
      } catch (const std::exception& e) {
        ddp::log("healing failed: " + ddp::short_what(e));
        ok = false;
      }
      ok = ch08::agree(inner, ok);  // every rank of the group healed, or none counts as healed
      if (!ok && a.heal) {  // a receiver holds half a state: it asks again, still behind; a donor goes on
        state.step = behind, failures = 1, failed_at = ddp::monotonic_seconds(), current.clear();
        continue;
      }
      const double healed_at = ddp::monotonic_seconds();

      // 5. Who contributes: the members that were not behind, at most --contributors of them
      //    (the rest are spares: the README's "global batch"). Contributor j takes the
      //    j-th slice of the step's global batch, which starts at the data position.
      std::vector<std::string> contributors;
      for (const ch08::Member& m : q.members)
        if (m.step == a.max_step && (o.contributors == 0 || static_cast<int>(contributors.size()) < o.contributors))
          contributors.push_back(m.replica_id);
      const auto me = std::find(contributors.begin(), contributors.end(), o.replica_id);
      const bool contributes = me != contributors.end() && !a.heal;
      fault.at("forward", state.step);
      if (o.step_ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(o.step_ms * 1000)));
      auto [x, y] = ddp::toy::batch(static_cast<int>(state.position / cfg.batch + (contributes ? me - contributors.begin() : 0) * G + local), 0, cfg.batch, 1);
      torch::Tensor loss = torch::mse_loss(model->forward(x), y);
      for (torch::Tensor& p : params) p.mutable_grad() = torch::Tensor();
      loss.backward();  // 05's DDP: the average over the group's ranks into .grad()
      std::vector<torch::Tensor> grads;  // the .grad() tensors themselves: averaged in place below
      for (const torch::Tensor& p : params) grads.push_back(p.grad());

      // 6. Average over the contributors (zeros from the others), vote, and apply only if all said yes
      //    (Note [Zeros until healed, and a vote]). --sync-every H: each contributor steps alone; every
      //    H steps the parameters are averaged (Note [Local SGD]), or the pseudo-gradients (Note [DiLoCo]).
      const int n = static_cast<int>(contributors.size());
      std::string average = o.sync_every > 0 ? "none" : "gradients";
      const auto hit = [&](const char* where) { fault.at(where, state.step); };  // --fault allreduce, vote
      if (o.sync_every > 0) {
        if (contributes) optimizer->step();
        if ((state.step + (state.diloco ? 1 : 0)) % o.sync_every == 0) {  // DiLoCo: after steps H-1, 2H-1, ...
          if (ch08::agree(inner, ok && (state.diloco ? ch08::sync_diloco(*pg, diloco, params, contributes, n, hit) : ch08::sync_parameters(*pg, params, contributes, n, hit)))) {
            average = state.diloco ? "pseudo-gradients" : "parameters", ++averages;
          } else {  // local SGD: each keeps its own parameters; DiLoCo: all go back to the global ones
            average = state.diloco ? "discarded" : "failed";
            if (state.diloco) ch08::discard_local_steps(diloco, params);
            ddp::log("step " + std::to_string(state.step) + ": the average failed" + (state.diloco ? ", back to the global parameters" : "") + "; asking for a new quorum");
            failures = 1, failed_at = ddp::monotonic_seconds(), current.clear();
            steps.line("failed " + std::to_string(failed_at));
          }
        }
      } else {
        ok = ok && ch08::average_gradients(*pg, grads, contributes, n, [&] { hit("allreduce"); });
        const bool commit = ch08::agree(inner, ch08::commit_vote(*pg, ok));  // every lane's vote passed
        hit("vote");
        if (!commit) {
          ddp::log("step " + std::to_string(state.step) + " failed (an all-reduce or the vote): not applied anywhere; "
                   "asking for a new quorum");
          failures = 1, failed_at = ddp::monotonic_seconds(), current.clear();
          steps.line("failed " + std::to_string(failed_at));
          continue;
        }
        optimizer->step(), ++averages;
      }
      steps.line(ch08::format_step({state.step, state.position, cfg.batch, q.id, contributors, average, G}));
      steps.line("committed " + std::to_string(state.step) + " at " + std::to_string(ddp::monotonic_seconds()));
      state.position += n * G * cfg.batch;
      ++state.step;
      if (failed_at >= 0 && failed_at < quorum_at) {  // a failure before this step's quorum: this step recovered
        steps.recovered(state.step - 1, {failed_at, quorum_at, group_at, healed_at, ddp::monotonic_seconds()});
        failed_at = -1;
      }
      if (state.step == 1 || state.step % 5 == 0 || state.step == cfg.steps)
        ddp::log("step " + std::to_string(state.step - 1) + ": loss " + std::to_string(loss.item<double>()) + " on " +
                 std::to_string(n) + " contributor(s), samples from " + std::to_string(state.position - n * G * cfg.batch));
    }
    // 7. The parameters' fingerprint, for the launcher to compare with every replica's and the replay's.
    if (local == 0) lighthouse.finished(state.step);
    const std::string fp = ddp::toy::fingerprint(params);
    if (local == 0) ddp::toy::save_params(params, o.out + "/params." + o.replica_id + ".pt");
    steps.line("final " + fp);
    int64_t bytes = 0;
    for (const torch::Tensor& p : params) bytes += p.numel() * p.element_size();
    ddp::log("done: " + std::to_string(state.step) + " steps, params fingerprint " + fp + "; all-reduced " +
             std::to_string(averages * bytes) + " bytes of " + (o.sync_every == 0 ? "gradients" : state.diloco ? "pseudo-gradients" : "parameters") + " in " +
             std::to_string(averages) + " averages");
    return ddp::kExitOk;
  });
}
