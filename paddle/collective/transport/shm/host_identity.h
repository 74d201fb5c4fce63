// Which ranks can share memory: the host identity every rank publishes at start-up.
//
// Two processes can use shared memory and process_vm_readv together when they run on one kernel
// and see each other's processes. The identity is the kernel's boot id, the IPC, mount and PID
// namespaces (a segment is opened through its creator's /proc/<pid>/fd, Note [Nameless
// segments] in shm_segment.cc; a container has its own) and the network namespace: ranks in
// different network namespaces are treated as different nodes, which is how the multi-node
// tests run on one machine, and matches containers on one host that were given separate
// networks.
// PADDLE_HOST_ID, when set, replaces the whole identity (ranks with equal values are treated as
// one node; a test can split one machine into "nodes" with it).
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SHM_HOST_IDENTITY_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SHM_HOST_IDENTITY_H_

#include <string>

namespace paddle {

inline constexpr char kHostIdEnvVar[] = "PADDLE_HOST_ID";

// "<hostname>/<boot id>/ipc:<inode>/mnt:<inode>/net:<inode>/pid:<inode>", or PADDLE_HOST_ID's
// value.
std::string HostIdentity();

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SHM_HOST_IDENTITY_H_
