// UCX loaded at run time, only by jobs that choose it (PADDLE_TRANSPORT=ucx).
//
// Linking libucp into every binary that has the native communicator made every process pay for
// UCX at start-up, used or not: UCX's memory hooks patch malloc and mmap when libucm is loaded
// (they crashed every ThreadSanitizer binary before main) and its libraries load and relocate
// before main. So nothing links libucp: ucx_library.cc defines the few UCP/UCS functions the
// transport calls, each forwarding to the real one found with dlsym in libucp.so.0, which
// LoadUcxLibrary() opens on the first UCX transport of the process (Note [UCX loaded on demand]).
#ifndef PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_LIBRARY_H_
#define PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_LIBRARY_H_

#include "absl/status/status.h"

namespace paddle {

// Opens libucp.so.0 (PADDLE_UCX_LIBRARY overrides the name or path) and resolves every function
// the transport uses, once per process; later calls return the first result. The error names the
// library, the dlopen/dlsym message, and that libucx0 provides it.
absl::Status LoadUcxLibrary();

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_LIBRARY_H_
