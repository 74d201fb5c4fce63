// Rendezvous URL parsing. Only what a rendezvous needs: scheme, host:port (IPv6 in brackets),
// path, and the query fields rank and world_size, percent-decoded. Unknown query fields are
// errors, so a typo such as "worldsize=" is caught instead of silently ignored.
#include "paddle/collective/rendezvous/url.h"

#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/types/optional.h"

namespace paddle {
namespace {

constexpr char kForms[] =
    "env://, tcp://HOST:PORT?rank=R&world_size=N, file:///PATH?rank=R&world_size=N or "
    "etcd://HOST:PORT/JOB?rank=R&world_size=N";

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::StatusOr<std::string> PercentDecode(absl::string_view in, absl::string_view url) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    int hi = i + 2 < in.size() ? HexDigit(in[i + 1]) : -1;
    int lo = i + 2 < in.size() ? HexDigit(in[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rendezvous URL '%s': bad percent escape at \"%s\"", url, in.substr(i, 3)));
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

// An integer field: `what` names it in errors ("rank=", "environment variable RANK").
absl::StatusOr<int> ParseInt(absl::string_view text, absl::string_view what,
                             absl::string_view url) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rendezvous URL '%s': %s is \"%s\", which is not an integer", url, what, text));
  }
  return value;
}

// "host:port" or "[v6]:port".
absl::Status ParseHostPort(absl::string_view authority, absl::string_view what,
                           absl::string_view url, RendezvousUrl* out) {
  absl::string_view host, port;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == absl::string_view::npos || close + 1 >= authority.size() ||
        authority[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rendezvous URL '%s': %s \"%s\" is not [IPV6]:PORT", url, what, authority));
    }
    host = authority.substr(1, close - 1);
    port = authority.substr(close + 2);
  } else {
    size_t colon = authority.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rendezvous URL '%s': %s \"%s\" has no port; expected HOST:PORT", url, what, authority));
    }
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rendezvous URL '%s': %s \"%s\" has no host", url, what, authority));
  }
  int p = 0;
  if (!absl::SimpleAtoi(port, &p) || p < 1 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rendezvous URL '%s': %s has port \"%s\"; a port is a number from 1 to 65535", url, what,
        port));
  }
  out->host = std::string(host);
  out->port = p;
  return absl::OkStatus();
}

absl::optional<std::string> GetEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return absl::nullopt;
  return std::string(value);
}

absl::StatusOr<std::string> RequireEnv(const char* name, absl::string_view url) {
  absl::optional<std::string> value = GetEnv(name);
  if (!value.has_value() || value->empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rendezvous URL '%s': environment variable %s is %s; env:// reads MASTER_ADDR, "
        "MASTER_PORT, RANK and WORLD_SIZE (torchrun and the paddle launcher set them), or use "
        "tcp://HOST:PORT?rank=R&world_size=N",
        url, name, value.has_value() ? "empty" : "not set"));
  }
  return *value;
}

// Note [Cluster engine ranks]: the launcher (and torchrun) set RANK and WORLD_SIZE; mpirun, an
// MPICH-style PMI launcher and srun set their own variables instead. The first pair whose rank
// variable is set wins, so a launcher's RANK beats an mpirun that happens to surround it.
struct RankVariables {
  const char* rank;
  const char* size;
};
constexpr RankVariables kRankVariables[] = {
    {"RANK", "WORLD_SIZE"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI_RANK", "PMI_SIZE"},
    {"SLURM_PROCID", "SLURM_NTASKS"},
};
constexpr const char* kLocalRankVariables[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                               "MPI_LOCALRANKID", "SLURM_LOCALID"};

absl::StatusOr<int> IntFromEnv(const char* name, absl::string_view url) {
  absl::StatusOr<std::string> value = RequireEnv(name, url);
  if (!value.ok()) return value.status();
  return ParseInt(*value, absl::StrCat("environment variable ", name), url);
}

// Fills out->rank and out->world_size (those not given in the query) from the first pair of
// kRankVariables whose rank variable is set.
absl::Status RankFromEnv(absl::string_view url, RendezvousUrl* out) {
  for (const RankVariables& vars : kRankVariables) {
    absl::optional<std::string> rank = GetEnv(vars.rank);
    if (!rank.has_value() || rank->empty()) continue;
    absl::StatusOr<int> r = IntFromEnv(vars.rank, url);
    if (!r.ok()) return r.status();
    absl::StatusOr<int> n = IntFromEnv(vars.size, url);
    if (!n.ok()) return n.status();
    if (out->rank < 0) out->rank = *r;
    if (out->world_size == 0) out->world_size = *n;
    out->rank_source = absl::StrCat(vars.rank, "/", vars.size);
    return absl::OkStatus();
  }
  // None set. RANK alone set is impossible here, so a missing WORLD_SIZE was reported above.
  return absl::InvalidArgumentError(absl::StrFormat(
      "rendezvous URL '%s': environment variable RANK is not set, nor OMPI_COMM_WORLD_RANK "
      "(mpirun), PMI_RANK (MPICH) or SLURM_PROCID (srun); env:// reads the rank and world size "
      "from RANK/WORLD_SIZE (set by the paddle launcher and torchrun) or one of those pairs, or "
      "use env://?rank=R&world_size=N",
      url));
}

// The local rank, or -1 when no variable names it.
absl::StatusOr<int> LocalRankFromEnv(absl::string_view url) {
  for (const char* name : kLocalRankVariables) {
    absl::optional<std::string> value = GetEnv(name);
    if (!value.has_value() || value->empty()) continue;
    absl::StatusOr<int> n = ParseInt(*value, absl::StrCat("environment variable ", name), url);
    if (!n.ok()) return n.status();
    if (*n < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rendezvous URL '%s': environment variable %s is %d; a local rank is at least 0", url,
          name, *n));
    }
    return *n;
  }
  return -1;
}

}  // namespace

absl::StatusOr<RendezvousUrl> ParseRendezvousUrl(absl::string_view url) {
  RendezvousUrl out;
  out.source = std::string(url);
  size_t sep = url.find("://");
  if (sep == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rendezvous URL '%s' has no scheme; expected one of %s", url, kForms));
  }
  absl::string_view scheme = url.substr(0, sep);
  absl::string_view rest = url.substr(sep + 3);
  absl::string_view query;
  if (size_t q = rest.find('?'); q != absl::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  absl::string_view path = slash == absl::string_view::npos ? "" : rest.substr(slash);

  // Query fields.
  absl::flat_hash_map<std::string, std::string> fields;
  for (absl::string_view part : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, '=');
    if (kv.first != "rank" && kv.first != "world_size") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rendezvous URL '%s': unknown field \"%s\"; the fields are rank and world_size", url,
          kv.first));
    }
    absl::StatusOr<std::string> value = PercentDecode(kv.second, url);
    if (!value.ok()) return value.status();
    if (!fields.emplace(std::string(kv.first), *value).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rendezvous URL '%s': field %s is given twice", url, kv.first));
    }
  }

  if (scheme == "env") {
    out.scheme = RendezvousScheme::kEnv;
    if (!authority.empty() || (!path.empty() && path != "/")) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rendezvous URL '%s': env:// takes no host or path (they come from MASTER_ADDR and "
          "MASTER_PORT)",
          url));
    }
    absl::StatusOr<std::string> addr = RequireEnv("MASTER_ADDR", url);
    if (!addr.ok()) return addr.status();
    absl::StatusOr<std::string> port = RequireEnv("MASTER_PORT", url);
    if (!port.ok()) return port.status();
    int p = 0;
    if (!absl::SimpleAtoi(*port, &p) || p < 1 || p > 65535) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rendezvous URL '%s': environment variable MASTER_PORT is \"%s\"; a port is a number "
          "from 1 to 65535",
          url, *port));
    }
    out.host = *addr;
    out.port = p;
    out.source = absl::StrCat("env:// (MASTER_ADDR=", out.host, ", MASTER_PORT=", p, ")");
    if (!fields.contains("rank") || !fields.contains("world_size")) {
      absl::Status s = RankFromEnv(url, &out);
      if (!s.ok()) return s;
    }
    absl::StatusOr<int> local_rank = LocalRankFromEnv(url);
    if (!local_rank.ok()) return local_rank.status();
    out.local_rank = *local_rank;
  } else if (scheme == "tcp" || scheme == "etcd") {
    out.scheme = scheme == "tcp" ? RendezvousScheme::kTcp : RendezvousScheme::kEtcd;
    absl::Status s = ParseHostPort(authority, "the address", url, &out);
    if (!s.ok()) return s;
    if (scheme == "tcp" && !path.empty() && path != "/") {
      return absl::InvalidArgumentError(
          absl::StrFormat("rendezvous URL '%s': tcp:// takes no path (\"%s\")", url, path));
    }
    if (scheme == "etcd") {
      absl::StatusOr<std::string> job = PercentDecode(path.empty() ? "" : path.substr(1), url);
      if (!job.ok()) return job.status();
      if (job->empty() || job->find('/') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "rendezvous URL '%s': etcd:// needs a job id as its path, one word without '/' "
            "(etcd://HOST:PORT/JOB?rank=R&world_size=N); got \"%s\"",
            url, *job));
      }
      out.path = *job;
    }
  } else if (scheme == "file") {
    out.scheme = RendezvousScheme::kFile;
    if (!authority.empty() && authority != "localhost") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rendezvous URL '%s': file:// takes an absolute path (file:///PATH, three slashes); "
          "\"%s\" reads as a host",
          url, authority));
    }
    absl::StatusOr<std::string> file = PercentDecode(path, url);
    if (!file.ok()) return file.status();
    if (file->size() < 2 || file->back() == '/') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rendezvous URL '%s': file:// needs the absolute path of a file (file:///PATH)", url));
    }
    out.path = *file;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rendezvous URL '%s': unknown scheme \"%s\"; expected one of %s", url, scheme, kForms));
  }

  // rank and world_size from the query (env:// filled them from the environment above).
  for (const char* field : {"rank", "world_size"}) {
    auto it = fields.find(field);
    int* target = field == std::string("rank") ? &out.rank : &out.world_size;
    if (it == fields.end()) {
      if (out.scheme == RendezvousScheme::kEnv) continue;
      return absl::InvalidArgumentError(
          absl::StrFormat("rendezvous URL '%s' has no %s; add ?rank=R&world_size=N", url, field));
    }
    absl::StatusOr<int> n = ParseInt(it->second, absl::StrCat(field, "="), url);
    if (!n.ok()) return n.status();
    *target = *n;
  }
  // Where the world size came from: the query, or the variable env:// read it from.
  std::string size_source = "world_size";
  if (!fields.contains("world_size") && !out.rank_source.empty()) {
    size_source = absl::StrCat("world_size (environment variable ",
                               out.rank_source.substr(out.rank_source.find('/') + 1), ")");
  }
  if (out.world_size < 1 || out.world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rendezvous URL '%s': %s is %d; it must be from 1 to %d", url, size_source,
                        out.world_size, kMaxWorldSize));
  }
  if (out.rank < 0 || out.rank >= out.world_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rendezvous URL '%s': rank %d is out of range for world_size %d (ranks are 0..%d)", url,
        out.rank, out.world_size, out.world_size - 1));
  }
  return out;
}

}  // namespace paddle
