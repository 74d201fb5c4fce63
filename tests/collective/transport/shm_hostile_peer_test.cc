// The shared-memory transport against a broken or hostile peer (Note [Untrusted rings] in
// shm_ring.h). Rank 0 is a real transport; rank 1 is this test, which follows the set-up protocol
// by hand (Note [Shm setup] in shm_transport.cc) and then writes raw bytes where a rank can:
// records with impossible lengths or stream offsets, impossible ring positions, a segment that
// is unstamped, of another layout, of a foreign name, size or owner. Each must end in an error
// that names peer 1 and the field, never in a crash or an overflow (run these under ASan).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/intranode/node_workspace.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/transport/shm/host_identity.h"
#include "paddle/collective/transport/shm/peer_process.h"
#include "paddle/collective/transport/shm/shm_ring.h"
#include "paddle/collective/transport/shm/shm_segment.h"
#include "paddle/collective/transport/shm/shm_transport.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace {

constexpr int kWorld = 2;
constexpr char kPrefix[] = "hostile";
constexpr uint64_t kTag = 7;
constexpr absl::Duration kWait = absl::Seconds(10);

void ExpectContainsAll(const absl::Status& status, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) {
    EXPECT_TRUE(absl::StrContains(status.message(), part)) << part << " not in " << status;
  }
}

// Rank 1 of a two-rank job, played by hand. Start() publishes its segment; Connect() lets rank
// 0's transport (set up on a thread) finish; then the Write*() calls put bytes into rank 0's
// inbound ring from rank 1.
class HostilePeer {
 public:
  // How rank 1's own segment is made, for the set-up cases.
  struct Segment {
    size_t bytes = ShmSegmentBytes(kWorld);
    bool stamp = true;
    std::function<void(ShmControl&)> edit;  // changes the stamp
    std::string published_name;             // replaces the name published in the store
    int owner = -1;                         // if set, the segment is given to this uid
  };

  HostilePeer() : store_(std::make_shared<HashStore>()) {}
  ~HostilePeer() {
    if (rank0_thread_.joinable()) rank0_thread_.join();
  }

  void Start(const Segment& how) {
    rank0_thread_ = std::thread([this] {
      TransportOptions options;
      options.rank = 0;
      options.world_size = kWorld;
      options.store = store_;
      options.store_prefix = kPrefix;
      options.connect_timeout = kWait;
      rank0_ = CreateShmTransport(options);
    });
    absl::StatusOr<std::unique_ptr<ShmSegment>> own = ShmSegment::Create("hostile-r1", how.bytes);
    ASSERT_TRUE(own.ok()) << own.status();
    own_ = std::move(*own);
    auto* control = static_cast<ShmControl*>(own_->data());
    // Note [Shm segment owner]: the job nonce rank 0 publishes (no PADDLE_STORE_TOKEN here).
    absl::StatusOr<std::string> nonce = store_->Get(absl::StrCat(kPrefix, "/shm/job/0"), kWait);
    ASSERT_TRUE(nonce.ok()) << nonce.status();
    uint64_t job_nonce = 0;
    ASSERT_TRUE(absl::SimpleAtoi(*nonce, &job_nonce)) << *nonce;
    const ProcessIdentity self = ProcessIdentity::Self();
    if (how.stamp) StampShmControl(*control, kWorld, {job_nonce, self.pid, self.start_ticks});
    if (how.edit) how.edit(*control);
    control->probe = 0x1234567;
    if (how.owner >= 0) {
      ASSERT_EQ(fchown(own_->shared_fd(), how.owner, -1), 0);
    }
    // The entry format of EncodeInfo in shm_transport.cc.
    const std::string info =
        absl::StrCat(HostIdentity(), "\t", self.pid, "\t", self.start_ticks, "\t",
                     how.published_name.empty() ? own_->name() : how.published_name, "\t",
                     reinterpret_cast<uint64_t>(&control->probe), "\t", control->probe);
    ASSERT_TRUE(store_->Set(absl::StrCat(kPrefix, "/shm/info/1"), info).ok());
  }

  // Set-up that rank 0 must refuse: its error.
  absl::Status Rank0SetupError() {
    rank0_thread_.join();
    if (rank0_.ok()) return absl::OkStatus();
    return rank0_.status();
  }

  // Set-up that must succeed: maps rank 0's segment and lets it finish.
  void Connect() {
    absl::StatusOr<std::string> info = store_->Get(absl::StrCat(kPrefix, "/shm/info/0"), kWait);
    ASSERT_TRUE(info.ok()) << info.status();
    std::vector<std::string> fields = absl::StrSplit(*info, '\t');
    ASSERT_EQ(fields.size(), 6u) << *info;
    absl::StatusOr<std::unique_ptr<ShmSegment>> opened =
        ShmSegment::Open(fields[3], ShmSegmentBytes(kWorld));
    ASSERT_TRUE(opened.ok()) << opened.status();
    rank0_segment_ = std::move(*opened);
    ASSERT_TRUE(store_->Set(absl::StrCat(kPrefix, "/shm/opened/1"), "1").ok());
    rank0_thread_.join();
    ASSERT_TRUE(rank0_.ok()) << rank0_.status();
    char* rank0 = static_cast<char*>(rank0_segment_->data());
    to_rank0_header_ = reinterpret_cast<ShmRingHeader*>(rank0 + kShmControlBytes + kShmRingStride);
    to_rank0_data_ = rank0 + kShmControlBytes + kShmRingStride + sizeof(ShmRingHeader);
  }

  Channel& rank0_channel() { return (*rank0_)->channel(1); }

  // A well-formed record (at an offset where it fits without padding).
  void WriteRecord(const ShmRecord& record, const void* payload) {
    WriteRaw(record, payload, record.length, static_cast<uint32_t>(ShmRecordBytes(record.length)));
  }

  // Any header and `payload_bytes` of `payload` at the producer's position; the head then moves
  // by `advance` bytes and rank 0's doorbell rings.
  void WriteRaw(const ShmRecord& record, const void* payload, size_t payload_bytes,
                uint32_t advance) {
    const size_t offset = head_ & (kShmRingBytes - 1);
    ASSERT_LE(offset + kShmRecordHeaderBytes + payload_bytes, kShmRingBytes);
    std::memcpy(to_rank0_data_ + offset, &record, sizeof(record));
    if (payload_bytes > 0) {
      std::memcpy(to_rank0_data_ + offset + kShmRecordHeaderBytes, payload, payload_bytes);
    }
    head_ += advance;
    to_rank0_header_->head.Post(head_);
    RingDoorbell(static_cast<ShmControl*>(rank0_segment_->data())->doorbell);
  }

  // Waits until rank 0 has consumed everything written so far.
  void WaitConsumed() {
    const absl::Time give_up = absl::Now() + kWait;
    while (to_rank0_header_->tail.Load() != head_ && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(to_rank0_header_->tail.Load(), head_);
  }

  // Moves rank 0's outbound ring's consumer position (in rank 1's own segment).
  void SetTailOfRank0Outbound(uint32_t tail) {
    auto* header = reinterpret_cast<ShmRingHeader*>(static_cast<char*>(own_->data()) +
                                                    kShmControlBytes + 0 * kShmRingStride);
    header->tail.Post(tail);
  }

 private:
  std::shared_ptr<HashStore> store_;
  std::thread rank0_thread_;
  absl::StatusOr<std::unique_ptr<Transport>> rank0_;
  std::unique_ptr<ShmSegment> own_;
  std::unique_ptr<ShmSegment> rank0_segment_;
  ShmRingHeader* to_rank0_header_ = nullptr;
  char* to_rank0_data_ = nullptr;
  uint32_t head_ = 0;
};

ShmRecord Record(ShmRecordKind kind, uint32_t length, uint64_t size, uint64_t word0 = 0) {
  ShmRecord record{};
  record.kind = kind;
  record.length = length;
  record.tag = kTag;
  record.size = size;
  record.word0 = word0;
  return record;
}

// Rank 0 waits for a receive of `bytes` with kTag; it must fail with kDataLoss naming peer 1 and
// `parts`, and every later request must fail alike.
void ExpectRank0Refuses(HostilePeer& peer, size_t bytes, const std::vector<std::string>& parts,
                        const std::function<void()>& corrupt) {
  std::vector<char> buffer(bytes);
  std::unique_ptr<TransportRequest> recv = peer.rank0_channel().Recv(buffer.data(), bytes, kTag);
  corrupt();
  absl::Status status = recv->Wait(Deadline::After(kWait));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  ExpectContainsAll(status, parts);
  ExpectContainsAll(status, {"rank 0/2", "peer 1 (pid ", "corrupt shared-memory ring"});
  std::unique_ptr<TransportRequest> later = peer.rank0_channel().Send(buffer.data(), 1, kTag);
  EXPECT_TRUE(absl::IsDataLoss(later->Wait(Deadline::After(kWait))));
}

class ShmHostilePeerTest : public testing::Test {
 protected:
  void SetUp() override {
    peer_.Start(HostilePeer::Segment());
    peer_.Connect();
  }
  HostilePeer peer_;
};

TEST_F(ShmHostilePeerTest, WellFormedRecordsStillArrive) {
  std::vector<char> sent(100, 'a');
  std::vector<char> got(100);
  auto recv = peer_.rank0_channel().Recv(got.data(), got.size(), kTag);
  ShmRecord record = Record(ShmRecordKind::kEager, 100, 100);
  peer_.WriteRecord(record, sent.data());
  ASSERT_TRUE(recv->Wait(Deadline::After(kWait)).ok());
  EXPECT_EQ(got, sent);
}

TEST_F(ShmHostilePeerTest, EagerLengthPastTheReceiveBuffer) {
  ExpectRank0Refuses(peer_, 16, {"eager record", "length 4096 differs from the message size 16"},
                     [&] {
                       std::vector<char> payload(4096, 'x');
                       peer_.WriteRaw(Record(ShmRecordKind::kEager, 4096, 16), payload.data(),
                                      payload.size(), ShmRecordBytes(4096));
                     });
}

TEST_F(ShmHostilePeerTest, StreamPieceOffsetPastTheMessage) {
  constexpr size_t kBytes = 100000;
  ExpectRank0Refuses(
      peer_, kBytes,
      {"stream record",
       "piece at offset 1048576 with length 1000 ends past the "
       "message size 100000"},
      [&] {
        std::vector<char> piece(1000, 'p');
        peer_.WriteRecord(Record(ShmRecordKind::kStream, 1000, kBytes), piece.data());
        peer_.WriteRecord(Record(ShmRecordKind::kStream, 1000, kBytes, 1 << 20), piece.data());
      });
}

TEST_F(ShmHostilePeerTest, StreamPieceOfABiggerMessageThanTheReceive) {
  // Within the size it claims, but past the receive buffer of the message streaming in.
  constexpr size_t kBytes = 100000;
  ExpectRank0Refuses(
      peer_, kBytes,
      {"stream piece of tag 7 for a 2097152-byte message at offset 1048576",
       "streaming in has 100000 bytes, 1000 of them received"},
      [&] {
        std::vector<char> piece(1000, 'p');
        peer_.WriteRecord(Record(ShmRecordKind::kStream, 1000, kBytes), piece.data());
        peer_.WriteRecord(Record(ShmRecordKind::kStream, 1000, 2 << 20, 1 << 20), piece.data());
      });
}

TEST_F(ShmHostilePeerTest, StreamPieceOutOfOrder) {
  constexpr size_t kBytes = 100000;
  ExpectRank0Refuses(peer_, kBytes, {"at offset 5000 (1000 bytes)", "1000 of them received"}, [&] {
    std::vector<char> piece(1000, 'p');
    peer_.WriteRecord(Record(ShmRecordKind::kStream, 1000, kBytes), piece.data());
    peer_.WriteRecord(Record(ShmRecordKind::kStream, 1000, kBytes, 5000), piece.data());
  });
}

TEST_F(ShmHostilePeerTest, NewMessageWhileOneStreamsIn) {
  constexpr size_t kBytes = 100000;
  ExpectRank0Refuses(
      peer_, kBytes, {"starts while a streamed message has 1000 of its 100000"}, [&] {
        std::vector<char> piece(1000, 'p');
        peer_.WriteRecord(Record(ShmRecordKind::kStream, 1000, kBytes), piece.data());
        peer_.WriteRecord(Record(ShmRecordKind::kEager, 8, 8), piece.data());
      });
}

TEST_F(ShmHostilePeerTest, LengthPastThePublishedBytes) {
  ExpectRank0Refuses(peer_, 200,
                     {"length 200 (320 ring bytes) is more than the 64 bytes published"}, [&] {
                       std::vector<char> payload(200, 'x');
                       peer_.WriteRaw(Record(ShmRecordKind::kEager, 200, 200), payload.data(),
                                      payload.size(), kShmRecordHeaderBytes);
                     });
}

TEST_F(ShmHostilePeerTest, RecordPastTheEndOfTheRing) {
  // A well-formed message takes the ring to 4096 bytes before its end (nobody receives it: it
  // is buffered); the next record claims 8192 bytes from there.
  const size_t first = kShmRingBytes - 4096 - kShmRecordHeaderBytes;
  std::vector<char> filler(first, 'f');
  ShmRecord record = Record(ShmRecordKind::kEager, first, first);
  record.tag = 99;
  ExpectRank0Refuses(
      peer_, 8192, {"length 8192 (8256 ring bytes) runs past the end of the ring, 4096 bytes on"},
      [&] {
        peer_.WriteRecord(record, filler.data());
        peer_.WaitConsumed();
        peer_.WriteRaw(Record(ShmRecordKind::kEager, 8192, 8192), nullptr, 0, ShmRecordBytes(8192));
      });
}

TEST_F(ShmHostilePeerTest, PadThatStopsShortOfTheEnd) {
  ExpectRank0Refuses(peer_, 16, {"pad record", "does not reach the end of the ring"}, [&] {
    peer_.WriteRaw(Record(ShmRecordKind::kPad, 0, 0), nullptr, 0, kShmRecordHeaderBytes);
    peer_.WriteRecord(Record(ShmRecordKind::kEager, 16, 16), std::string(16, 'z').data());
  });
}

TEST_F(ShmHostilePeerTest, UnknownKind) {
  ExpectRank0Refuses(peer_, 16, {"unknown record (kind 42)"}, [&] {
    peer_.WriteRaw(Record(static_cast<ShmRecordKind>(42), 0, 16), nullptr, 0,
                   kShmRecordHeaderBytes);
  });
}

TEST_F(ShmHostilePeerTest, HeadFartherThanTheRingFromTheTail) {
  ExpectRank0Refuses(peer_, 16, {"the producer's head 2097152 is 2097152 bytes past"}, [&] {
    peer_.WriteRaw(Record(ShmRecordKind::kEager, 16, 16), nullptr, 0, 2 << 20);
  });
}

TEST_F(ShmHostilePeerTest, ConsumerTailFartherThanTheRingFromTheHead) {
  // Rank 0 writes into rank 1's segment; rank 1 moves that ring's tail to an impossible place.
  peer_.SetTailOfRank0Outbound(0x80000000u);
  std::vector<char> buffer(16);
  absl::Status status =
      peer_.rank0_channel().Send(buffer.data(), buffer.size(), kTag)->Wait(Deadline::After(kWait));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  ExpectContainsAll(status, {"the consumer's tail 2147483648 is 2147483648 bytes behind",
                             "rank 0/2", "peer 1 (pid "});
}

// ---- Set-up ------------------------------------------------------------------------------------

absl::Status Rank0SetupError(const HostilePeer::Segment& how) {
  HostilePeer peer;
  peer.Start(how);
  return peer.Rank0SetupError();
}

TEST(ShmHostilePeerSetupTest, UnstampedSegment) {
  HostilePeer::Segment how;
  how.stamp = false;
  absl::Status status = Rank0SetupError(how);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  ExpectContainsAll(status, {"is not a segment of this transport", "starts with 0x0000000000000000",
                             "peer 1 (pid ", "/paddle-"});
}

TEST(ShmHostilePeerSetupTest, OtherLayoutVersion) {
  HostilePeer::Segment how;
  how.edit = [](ShmControl& control) { control.version = 999; };
  absl::Status status = Rank0SetupError(how);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  ExpectContainsAll(status, {"has layout version 999, this build has", "same build"});
}

TEST(ShmHostilePeerSetupTest, OtherLayoutSizes) {
  HostilePeer::Segment how;
  how.edit = [](ShmControl& control) { control.world_size = 3; };
  absl::Status status = Rank0SetupError(how);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  ExpectContainsAll(status, {"is laid out for 3 ranks", "this rank expects 2"});
}

// Note [Shm segment owner]: a well-stamped segment of this user but of another job, or created
// by a process other than the one that published it, is refused.
TEST(ShmHostilePeerSetupTest, SegmentOfAnotherJob) {
  HostilePeer::Segment how;
  how.edit = [](ShmControl& control) { control.job_nonce ^= 0x5a5a; };
  absl::Status status = Rank0SetupError(how);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  ExpectContainsAll(status, {"belongs to another job (job nonce 0x", "this job's is 0x",
                             "peer 1 (pid ", "/paddle-"});
}

TEST(ShmHostilePeerSetupTest, SegmentOfAnotherProcess) {
  HostilePeer::Segment how;
  how.edit = [](ShmControl& control) { control.owner_pid = 1; };
  absl::Status status = Rank0SetupError(how);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  ExpectContainsAll(status, {"was created by pid 1 (start tick ",
                             absl::StrCat("not by the rank that published it, pid ", getpid()),
                             "foreign segment"});
}

TEST(ShmHostilePeerSetupTest, ForeignNames) {
  for (const char* name : {"/other-program-segment", "/paddle-../../etc/passwd", "/paddle-",
                           "paddle-no-slash", "/paddle-a b"}) {
    HostilePeer::Segment how;
    how.published_name = name;
    absl::Status status = Rank0SetupError(how);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    ExpectContainsAll(status, {absl::StrCat("refusing to open shared-memory segment \"", name),
                               "not a reference of this transport", "peer 1 (pid "});
  }
}

// Note [Nameless segments]: a reference names a descriptor of the creator; Open maps only the
// very segment the reference describes, of this PID namespace, while its creator shares it.
std::string PidNamespaceInode() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? absl::StrCat(st.st_ino) : "0";
}

TEST(ShmSegmentTest, OpensWhileSharedAndNotAfter) {
  absl::StatusOr<std::unique_ptr<ShmSegment>> made = ShmSegment::Create("seg-test", 8192);
  ASSERT_TRUE(made.ok()) << made.status();
  static_cast<char*>((*made)->data())[100] = 42;
  EXPECT_TRUE(absl::StartsWith((*made)->name(),
                               absl::StrCat("/paddle-", PidNamespaceInode(), "-", getpid(), "-")))
      << (*made)->name();
  absl::StatusOr<std::unique_ptr<ShmSegment>> opened = ShmSegment::Open((*made)->name(), 8192);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(static_cast<char*>((*opened)->data())[100], 42);
  static_cast<char*>((*opened)->data())[200] = 7;
  EXPECT_EQ(static_cast<char*>((*made)->data())[200], 7);
  (*made)->StopSharing();
  EXPECT_EQ((*made)->shared_fd(), -1);
  absl::StatusOr<std::unique_ptr<ShmSegment>> late = ShmSegment::Open((*made)->name(), 8192);
  EXPECT_FALSE(late.ok());
  ExpectContainsAll(late.status(), {"opening shared-memory segment ", (*made)->name()});
}

TEST(ShmSegmentTest, RefusesAnotherFileOfTheCreator) {
  // A forged reference that points at a descriptor of the creator holding some other file.
  const std::string path = absl::StrCat(testing::TempDir(), "/not-a-segment");
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  const std::string forged =
      absl::StrCat("/paddle-", PidNamespaceInode(), "-", getpid(), "-", fd, "-ws-0000abcd");
  absl::StatusOr<std::unique_ptr<ShmSegment>> opened = ShmSegment::Open(forged, 4096);
  close(fd);
  EXPECT_TRUE(absl::IsPermissionDenied(opened.status())) << opened.status();
  ExpectContainsAll(opened.status(), {"refusing to map shared-memory segment ", forged,
                                      "not-a-segment", "not that segment"});
}

TEST(ShmSegmentTest, RefusesAnotherPidNamespace) {
  const std::string other = absl::StrCat("/paddle-1-", getpid(), "-3-ws-0000abcd");
  absl::StatusOr<std::unique_ptr<ShmSegment>> opened = ShmSegment::Open(other, 4096);
  EXPECT_TRUE(absl::IsFailedPrecondition(opened.status())) << opened.status();
  ExpectContainsAll(opened.status(), {"was made in PID namespace 1", "must see each other's"});
}

TEST(ShmHostilePeerSetupTest, WrongSize) {
  HostilePeer::Segment how;
  how.bytes = ShmSegmentBytes(kWorld) + 4096;
  absl::Status status = Rank0SetupError(how);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  ExpectContainsAll(
      status, {absl::StrCat("has ", how.bytes, " bytes, expected ", ShmSegmentBytes(kWorld))});
}

TEST(ShmHostilePeerSetupTest, OtherOwner) {
  {
    absl::StatusOr<std::unique_ptr<ShmSegment>> probe = ShmSegment::Create("owner-probe", 4096);
    ASSERT_TRUE(probe.ok()) << probe.status();
    if (fchown((*probe)->shared_fd(), 65534, -1) != 0) {
      GTEST_SKIP() << "this process may not give a file to uid 65534 (Bazel's sandbox); it runs "
                      "when the test binary is run directly as root";
    }
  }
  HostilePeer::Segment how;
  how.owner = 65534;
  absl::Status status = Rank0SetupError(how);
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  ExpectContainsAll(status, {"refusing to map shared-memory segment /paddle-",
                             "belongs to uid 65534", absl::StrCat("runs as uid ", geteuid())});
}

// A transport or workspace created directly (no communicator checked the settings first) meets a
// malformed PADDLE_SHM_SPIN_US as an error naming it, not as an abort.
TEST(ShmSettingsTest, MalformedSpinIsAnErrorNamingTheVariableAndValue) {
  ScopedEnv spin("PADDLE_SHM_SPIN_US", "fast");
  TransportOptions options;
  options.rank = 0;
  options.world_size = 1;
  absl::StatusOr<std::unique_ptr<Transport>> transport = CreateShmTransport(options);
  ASSERT_FALSE(transport.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(transport.status())) << transport.status();
  ExpectContainsAll(transport.status(), {"PADDLE_SHM_SPIN_US", "fast", "rank 0/1"});

  NodeWorkspaceOptions workspace;
  workspace.local_rank = 0;
  workspace.local_size = 1;
  workspace.global_ranks = {0};
  workspace.world_size = 1;
  absl::StatusOr<std::unique_ptr<NodeWorkspace>> ws = NodeWorkspace::Create(workspace);
  ASSERT_FALSE(ws.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ws.status())) << ws.status();
  ExpectContainsAll(ws.status(), {"PADDLE_SHM_SPIN_US", "fast", "node workspace"});
}

}  // namespace
}  // namespace paddle
