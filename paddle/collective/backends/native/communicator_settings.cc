// Resolving a native communicator's settings and choosing its transport; see
// communicator_settings.h.
#include "paddle/collective/backends/native/communicator_settings.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/shm/host_identity.h"
#include "paddle/collective/transport/shm/shm_transport.h"
#include "paddle/collective/transport/tcp/tcp_transport.h"
#include "paddle/collective/transport/ucx/ucx_transport.h"
#include "paddle/core/cpu_features.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {

absl::StatusOr<Settings> ResolveSettings(const CommunicatorOptions& options) {
  Settings settings;
  std::string transport = absl::AsciiStrToLower(options.transport);
  std::string source = "CommunicatorOptions.transport";
  if (transport == "auto" || transport.empty()) {
    ASSIGN_OR_RETURN(std::optional<std::string> env, ChoiceSetting(kTransportEnvVar));
    transport = env.value_or("");
    source = kTransportEnvVar;
  }
  if (transport.empty()) transport = "auto";
  if (transport == "auto" || transport == "tcp" || transport == "shm" || transport == "ucx") {
    settings.transport = transport;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is \"", transport,
                     "\"; the native backend supports \"auto\", \"tcp\", \"shm\" and \"ucx\""));
  }
  ASSIGN_OR_RETURN(settings.slot_bytes, SlotBytesFromEnv());

  if (options.algorithm.empty()) {
    ASSIGN_OR_RETURN(settings.selector, AlgorithmSelector::FromEnv());
  } else {
    absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(options.algorithm);
    if (!algorithm.ok()) {
      return Annotate(algorithm.status(), "CommunicatorOptions.algorithm");
    }
    settings.selector = AlgorithmSelector(*algorithm);
  }
  if (!settings.selector.forced().has_value()) {
    if (std::optional<std::string> path = StringSetting(kTuningParamsEnvVar)) {
      absl::StatusOr<TuningParams> params = TuningParams::Load(*path);
      if (!params.ok()) return Annotate(params.status(), kTuningParamsEnvVar);
      settings.tuning_params = std::make_shared<const TuningParams>(*std::move(params));
    }
  }

  ASSIGN_OR_RETURN(std::optional<int64_t> piece, IntSetting(kPieceBytesEnvVar));
  if (piece.has_value()) settings.piece_bytes = static_cast<size_t>(*piece);
  // Read here so that a malformed value is an error now, not an abort in DefaultShmSpin later.
  RETURN_IF_ERROR(IntSetting("PADDLE_SHM_SPIN_US").status());
  return settings;
}

// Note [Sizes when ranks outnumber cores]
// Every round of the node workspace and every piece of a pipelined algorithm ends in waits for
// peers. With a core per rank those waits are short spins, and small pieces (256 KiB) and slots
// (512 KiB) pipeline best. With more ranks than cores, a wait for a rank that is not running is a
// futex sleep and a context switch, so the node workspace takes fewer, larger rounds (about a
// third of the context switches at 4 ranks). Slots grow only while the slots of all local ranks
// stay within ~16 MiB (two buffers of 8 MiB / local_size each, 512 KiB to 2 MiB), since larger
// ones left the cache and lost again.
// Pieces stay at 256 KiB: with waiters driving their own sockets, 1 MiB pieces lost everywhere
// they were measured (docs/performance-notes.md, "Sizes when ranks outnumber cores"). What gains
// there is the algorithm: shared cores get their own allreduce table
// (AllreduceTable::kSharedCores, Note [Algorithm table]). Rank 0 decides for everyone, because
// pieces must be cut alike and algorithms chosen alike on every rank, and hosts may differ in
// cores.
namespace {

constexpr size_t kOversubscribedSlotBudget = size_t{8} << 20;
constexpr size_t kMaxAutomaticSlotBytes = size_t{2} << 20;

}  // namespace

HostTuning AutomaticTuning(int local_size, int cores) {
  if (local_size <= cores) {
    return {kDefaultPieceBytes, kDefaultSlotBytes, AllreduceTable::kCorePerRank};
  }
  const size_t per_rank = kOversubscribedSlotBudget / static_cast<size_t>(local_size) / 4096 * 4096;
  return {kDefaultPieceBytes, std::clamp(per_rank, kDefaultSlotBytes, kMaxAutomaticSlotBytes),
          AllreduceTable::kSharedCores};
}

namespace {

// The tuning file's entry name for the transport rank 0 found: "auto" is shared memory on one
// host (every rank local) and TCP across hosts (Note [Transport choice]).
std::string ModelTransport(const Settings& settings, int world_size, int local_size) {
  if (settings.transport == "auto") return local_size == world_size ? "shm" : "tcp";
  return settings.transport;
}

// "model=none" or "model=tcp@2:ALPHA,OVERHEAD,BETA,GAMMA,MEMORY,RENDEZVOUS,RENDEZVOUS_BETA,
// CACHE_BYTES,EAGER_BYTES,SMALL_PAGE,HUGE_PAGE_BYTES" (exact doubles, LinkCost's fields in order),
// as rank 0 publishes.
std::string DescribeModel(const AlgorithmSelector& selector) {
  if (!selector.tuned().has_value()) return "model=none";
  const LinkCost& l = selector.tuned()->link;
  return absl::StrFormat(
      "model=%s:%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g",
      selector.tuned()->entry, l.alpha_us, l.overhead_us, l.beta_us_per_byte, l.gamma_us_per_byte,
      l.memory_us_per_byte, l.rendezvous_us, l.rendezvous_beta_us_per_byte, l.cache_bytes,
      l.eager_bytes, l.small_page_us_per_byte, l.huge_page_bytes);
}

// The inverse of DescribeModel; false when `text` is neither form.
bool ParseModel(const std::string& text, size_t piece_bytes, AllreduceTable table,
                AlgorithmSelector* selector) {
  if (text == "model=none") {
    *selector = AlgorithmSelector(table);
    return true;
  }
  char entry[64] = {0};
  TunedAllreduce tuned;
  LinkCost& l = tuned.link;
  if (std::sscanf(text.c_str(), "model=%63[^:]:%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", entry,
                  &l.alpha_us, &l.overhead_us, &l.beta_us_per_byte, &l.gamma_us_per_byte,
                  &l.memory_us_per_byte, &l.rendezvous_us, &l.rendezvous_beta_us_per_byte,
                  &l.cache_bytes, &l.eager_bytes, &l.small_page_us_per_byte,
                  &l.huge_page_bytes) != 12) {
    return false;
  }
  tuned.entry = entry;
  tuned.piece_bytes = static_cast<int64_t>(piece_bytes);
  *selector = AlgorithmSelector(table, std::move(tuned));
  return true;
}

}  // namespace

absl::Status AgreeOnTuning(Store* store, const std::string& key, int rank, int world_size,
                           int local_size, absl::Duration timeout, Settings* settings) {
  const bool table_automatic = !settings->selector.forced().has_value();
  if (rank == 0 || world_size == 1) {
    const HostTuning automatic = AutomaticTuning(local_size, CoresAvailable());
    if (settings->piece_bytes == 0) settings->piece_bytes = automatic.piece_bytes;
    if (settings->slot_bytes == 0) settings->slot_bytes = automatic.slot_bytes;
    if (table_automatic) settings->selector = AlgorithmSelector(automatic.allreduce_table);
    if (table_automatic && settings->tuning_params != nullptr) {
      const std::string transport = ModelTransport(*settings, world_size, local_size);
      TunedAllreduce tuned;
      if (const LinkCost* link =
              settings->tuning_params->Find(transport, local_size, &tuned.entry)) {
        tuned.link = *link;
        tuned.piece_bytes = static_cast<int64_t>(settings->piece_bytes);
        PADDLE_LOG(INFO, INIT) << "allreduce algorithms from the cost model " << tuned.entry
                               << " of " << settings->tuning_params->path() << " for " << world_size
                               << " ranks over " << transport;
        settings->selector = AlgorithmSelector(automatic.allreduce_table, std::move(tuned));
      } else {
        PADDLE_LOG(WARN, INIT) << kTuningParamsEnvVar << "=" << settings->tuning_params->path()
                               << " has no link for transport " << transport
                               << "; the allreduce table applies";
      }
    }
    if (world_size == 1) return absl::OkStatus();
    // Published even when the user set everything: a rank left on "auto" by a mismatched
    // environment then still finds the key, and the settings check names the difference.
    return Annotate(
        store->Set(key, absl::StrCat("piece_bytes=", settings->piece_bytes,
                                     " slot_bytes=", settings->slot_bytes, " allreduce_table=",
                                     AllreduceTableName(settings->selector.table()), " ",
                                     DescribeModel(settings->selector))),
        "publishing the piece and slot sizes, the allreduce table and the cost model");
  }
  if (settings->piece_bytes != 0 && settings->slot_bytes != 0 && !table_automatic) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> published = store->Get(key, timeout);
  if (!published.ok()) {
    return Annotate(published.status(),
                    "reading rank 0's piece and slot sizes and allreduce table");
  }
  HostTuning tuning;
  char table_name[32] = {0};
  char model[512] = {0};
  absl::StatusOr<AllreduceTable> table = absl::InvalidArgumentError("missing");
  if (std::sscanf(published->c_str(), "piece_bytes=%zu slot_bytes=%zu allreduce_table=%31s %511s",
                  &tuning.piece_bytes, &tuning.slot_bytes, table_name, model) == 4) {
    table = ParseAllreduceTable(table_name);
  }
  const size_t piece_bytes =
      settings->piece_bytes != 0 ? settings->piece_bytes : tuning.piece_bytes;
  AlgorithmSelector selector = settings->selector;
  if (!table.ok() || tuning.piece_bytes == 0 || tuning.slot_bytes == 0 ||
      !ParseModel(model, piece_bytes, table.ok() ? *table : AllreduceTable{}, &selector)) {
    return absl::InternalError(absl::StrCat("rank 0 published \"", *published, "\" under ", key,
                                            " instead of piece and slot sizes, an allreduce "
                                            "table and a cost model"));
  }
  settings->piece_bytes = piece_bytes;
  if (settings->slot_bytes == 0) settings->slot_bytes = tuning.slot_bytes;
  if (table_automatic) settings->selector = selector;
  return absl::OkStatus();
}

// Note [Transport choice]
// PADDLE_TRANSPORT (CommunicatorOptions.transport) picks what carries point-to-point messages
// and the flat algorithms, and whether the ranks of a host share memory:
//   auto  shared memory between the ranks of a host; TCP between hosts (and for everything when
//         each host runs one rank)
//   tcp   every byte through TCP sockets, no shared memory at all (the pre-shm behaviour)
//   shm   all ranks must be on one host; everything through shared memory
//   ucx   UCX between all ranks (its own transports: UCX_TLS), plus the node workspace
// With shared memory, allreduce, broadcast, allgather, reduce-scatter and alltoall among the
// ranks of one host run on the node workspace (paddle/collective/intranode/shm_collectives.h), and
// an allreduce over several hosts with equally many ranks each is hierarchical. PADDLE_ALGO=ring,
// tree or hd forces the flat algorithms over the transport instead.
absl::StatusOr<std::unique_ptr<Transport>> CreateGroupTransport(const Settings& settings,
                                                                const Topology& topology,
                                                                const TransportOptions& options) {
  if (settings.transport == "shm" && topology.num_hosts > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PADDLE_TRANSPORT=shm needs every rank on one host, but the ranks run on ",
        topology.Describe(), " (host identities differ: hostname, boot id or namespaces; see ",
        kHostIdEnvVar, "); use PADDLE_TRANSPORT=auto or tcp"));
  }
  if (settings.transport == "shm" || (settings.transport == "auto" && topology.num_hosts == 1)) {
    return CreateShmTransport(options);
  }
  if (settings.transport == "ucx") return CreateUcxTransport(options);
  return CreateTcpTransport(options);
}

}  // namespace paddle
