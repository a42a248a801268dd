// This machine's facts for --check. CUDA versions come from the runtime the binary links;
// NCCL's from whichever libnccl.so.2 the loader finds, so the check reports the library the
// workers would load even though this build does not link it.
#include "comm/launcher/check/node_facts.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <map>
#include <sstream>

#include "core/cuda_memory.h"
#include "core/error.h"
#include "core/hostname.h"
#include "ringgrad/config.h"
#if HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace ringgrad::comm {

namespace {

#if HAVE_CUDA
// 13000 -> "13.0"
std::string cuda_version_text(int v) { return str_cat(v / 1000, ".", (v % 1000) / 10); }

std::string nccl_version_text() {
  void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return str_cat("NCCL not found (", ::dlerror(), ")");
  using GetVersion = int (*)(int*);
  auto get = reinterpret_cast<GetVersion>(::dlsym(lib, "ncclGetVersion"));
  int v = 0;
  std::string text = "NCCL version unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  if (get && get(&v) == 0) text = str_cat("NCCL ", v / 10000, ".", (v / 100) % 100, ".", v % 100);
  ::dlclose(lib);
  return text;
}

std::string describe_cuda(int devices) {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::map<std::string, int> models;  // "NVIDIA H200" -> how many
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) ++models[prop.name];
  }
  std::string text;
  for (const auto& [name, n] : models) text += str_cat(text.empty() ? "" : ", ", n, " x ", name);
  return str_cat(text, "; driver ", cuda_version_text(driver), ", runtime ",
                 cuda_version_text(runtime), "; ", nccl_version_text());
}
#endif

}  // namespace

std::string build_description() {
  return str_cat("ringgrad ", RINGGRAD_VERSION, " ", RINGGRAD_BUILD_TYPE,
#if HAVE_CUDA
                 " cuda=on",
#else
                 " cuda=off",
#endif
#if HAVE_NCCL
                 " nccl=on",
#else
                 " nccl=off",
#endif
                 " gcc ", __VERSION__);
}

NodeFacts local_node_facts() {
  NodeFacts f;
  f.hostname = hostname();
  f.build = build_description();
  cpu_set_t set;
  f.cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  f.cpus_online = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
#if HAVE_CUDA
  f.cuda_built = true;
  f.cuda_devices = cuda_device_count();
  f.cuda = f.cuda_devices > 0 ? describe_cuda(f.cuda_devices)
                              : str_cat("no device: ", cuda_unavailable_reason());
#else
  f.cuda = "not built with CUDA (RINGGRAD_ENABLE_CUDA=OFF)";
#endif
  return f;
}

std::string serialize_node_facts(const NodeFacts& f) {
  return str_cat("hostname=", f.hostname, "\nbuild=", f.build, "\ncpus=", f.cpus,
                 "\ncpus_online=", f.cpus_online, "\ncuda_devices=", f.cuda_devices,
                 "\ncuda_built=", f.cuda_built ? 1 : 0, "\ncuda=", f.cuda, "\n");
}

NodeFacts parse_node_facts(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos)
      RG_THROW(InvalidArgument, "node facts: malformed line '", line, "'");
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  auto number = [&](const char* key) {
    try {
      return std::stoi(kv.at(key));
    } catch (const std::exception&) {
      RG_THROW(InvalidArgument, "node facts: '", key, "' missing or not a number");
    }
  };
  NodeFacts f;
  f.hostname = kv["hostname"];
  f.build = kv["build"];
  f.cpus = number("cpus");
  f.cpus_online = number("cpus_online");
  f.cuda_devices = number("cuda_devices");
  f.cuda_built = number("cuda_built") != 0;
  f.cuda = kv["cuda"];
  return f;
}

}  // namespace ringgrad::comm
