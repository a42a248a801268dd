// NodeFacts: what `ringgrad-run --check` learns about the machine it runs on (host, build,
// CPUs, CUDA and NCCL), in a key=value text form the nodes exchange through the store.
#pragma once
#include <string>

namespace ringgrad::comm {

struct NodeFacts {
  std::string hostname;
  std::string build;  // version, build type, CUDA/NCCL options and compiler: must match
  int cpus = 0;       // CPUs this process may run on (its affinity mask)
  int cpus_online = 0;
  int cuda_devices = 0;
  std::string cuda;  // "2 x NVIDIA H200, driver 13.0, runtime 13.0, NCCL 2.27.3" or why none
  bool cuda_built = false;
};

// Every field of this machine. Never throws: what cannot be learned is said in the text.
NodeFacts local_node_facts();
// The build string of this binary (config.h and the compiler).
std::string build_description();

std::string serialize_node_facts(const NodeFacts& facts);
NodeFacts parse_node_facts(const std::string& text);  // throws InvalidArgument when malformed

}  // namespace ringgrad::comm
