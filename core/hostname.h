// This machine's name as the kernel reports it (gethostname), for logs, rank tables and the
// launcher's choice of which node hosts the rendezvous store.
#pragma once
#include <string>

namespace ringgrad {

std::string hostname();  // "" if the kernel will not say

}  // namespace ringgrad
