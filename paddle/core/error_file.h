// The error file: how a worker tells its launcher why it fails, before its peers fail because of
// it.
//
// A rank that fails on its own cause (a full disk, a bad input) aborts its communicator, and its
// peers then fail too, often exiting before it does; a launcher that blamed the first worker to
// exit would name a peer. So such a rank first calls RecordError, which writes the time and its
// cause to PADDLE_ERROR_FILE (the launcher gives each worker its own), and the launcher names the
// worker whose file is the earliest (Note [One verdict] in tools/paddlerun/agent.py), as
// torchelastic's error files do. Only the first call of a process writes; without the setting
// nothing is written.
//
// The file: "<unix time in ns> <rank>\n<message>".
#ifndef PADDLE_CORE_ERROR_FILE_H_
#define PADDLE_CORE_ERROR_FILE_H_

#include "absl/status/status.h"

namespace paddle {

// Writes `cause` (with `rank`, -1 when unknown) to PADDLE_ERROR_FILE, if set and if this process
// has not written it yet. Never fails: a file that cannot be written is logged and skipped.
void RecordError(const absl::Status& cause, int rank);

}  // namespace paddle

#endif  // PADDLE_CORE_ERROR_FILE_H_
