// defines: Watchdog: ends the process with a message if a step that should take seconds never ends.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace ddp {

// Some waits in LibTorch have no timeout of their own (a TCPStore client talking to a program
// that accepted the connection but never answers, for one). A Watchdog bounds them: if it is
// still armed after `limit`, it logs what the process was doing and calls _exit(1).
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds limit, std::string doing);
  ~Watchdog() { disarm(); }
  void disarm();  // the step finished in time; safe to call twice
  void doing(std::string what);  // what the message will say we were stuck on

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string doing_;
  std::thread thread_;
};

}  // namespace ddp
