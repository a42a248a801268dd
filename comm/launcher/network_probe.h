// Questions the launcher asks this host's network stack: is an address one of ours (so we
// should host the rendezvous store, and may bind there).
#pragma once
#include <string>

namespace ringgrad::comm {

bool is_loopback_host(const std::string& host);  // "localhost", 127.x, ::1
// True if `host` resolves to an address of an interface of this machine.
bool is_local_host(const std::string& host);
// True if `host` resolves to the IPv4 address `ipv4` (among others).
bool resolves_to(const std::string& host, const std::string& ipv4);

}  // namespace ringgrad::comm
