// defines: small socket helpers: this host's name, a free TCP port, loopback detection.
#pragma once
#include <string>

namespace ddp {

std::string hostname();
// A port the OS says is free right now on `host` (bind to port 0, read it back, close).
// Only a suggestion: someone may take it before you do.
// With `port_wanted`: that port if it is free right now, else -1.
int find_free_port(const std::string& host = "127.0.0.1", int port_wanted = 0);
bool is_loopback(const std::string& addr);
// "--master-port N (free right now) or MASTER_PORT=N": the fix every port refusal offers.
std::string free_port_hint();

}  // namespace ddp
