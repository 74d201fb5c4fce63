// Rendezvous URLs: how a process learns which store to meet the others in, its rank and the
// world size.
//
//   env://                                   MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the
//                                            environment, as torchrun sets them
//   tcp://host:port?rank=R&world_size=N      rank 0 hosts a TcpStoreServer on host:port
//   file:///path/to/file?rank=R&world_size=N a FileStore shared through a filesystem
//   etcd://host:port/JOB?rank=R&world_size=N an EtcdStore with every key under JOB
//
// env:// also accepts ?rank= and ?world_size=, which win over RANK and WORLD_SIZE. Under a cluster
// engine that does not set RANK/WORLD_SIZE, env:// takes the rank and world size from the first
// pair that is set of OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_RANK/
// PMI_SIZE (MPICH, Intel MPI) and SLURM_PROCID/SLURM_NTASKS (srun); MASTER_ADDR and MASTER_PORT
// still come from the environment (mpirun -x, or exported before srun). Parsing checks
// everything it can before any process waits on anything: a missing or garbled field is an
// error naming the field (or environment variable) and its value.
#ifndef PADDLE_COLLECTIVE_RENDEZVOUS_URL_H_
#define PADDLE_COLLECTIVE_RENDEZVOUS_URL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {

enum class RendezvousScheme { kEnv, kTcp, kFile, kEtcd };

// The largest world size a rendezvous accepts. Rank 0 keeps state per rank (store keys, a
// channel per peer), so a typo such as WORLD_SIZE=2000000000 must be an error before it
// allocates; 2^20 ranks is ten times the largest jobs run today.
inline constexpr int kMaxWorldSize = 1 << 20;

struct RendezvousUrl {
  RendezvousScheme scheme = RendezvousScheme::kTcp;
  std::string host;  // env, tcp, etcd
  int port = 0;      // env, tcp, etcd
  std::string path;  // file: the store file; etcd: the job id
  int rank = -1;
  int world_size = 0;
  // env:// only: LOCAL_RANK, else OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or SLURM_LOCALID;
  // -1 when none is set.
  int local_rank = -1;
  // env:// only: the variables the rank and world size came from, e.g. "RANK/WORLD_SIZE".
  std::string rank_source;
  // Where the host and port came from, for messages: "tcp://..." or "MASTER_ADDR/MASTER_PORT".
  std::string source;
};

// Parses `url`, reading the environment for env://. kInvalidArgument naming the field or variable
// for anything malformed, a rank outside 0..world_size-1 or a world size outside 1..kMaxWorldSize.
absl::StatusOr<RendezvousUrl> ParseRendezvousUrl(absl::string_view url);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_RENDEZVOUS_URL_H_
