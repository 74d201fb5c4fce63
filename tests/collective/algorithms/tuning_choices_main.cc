// Prints the allreduce algorithm the C++ cost model picks from a tuning file, for
// tests/tools/tuning_agreement_test.py to compare with `tools/simulate tune`:
//   tuning_choices FILE LINK PIECE_BYTES N...   ->  "N BYTES ALGO" lines, 4 KiB .. 256 MiB
#include <cstdio>
#include <cstdlib>
#include <string>

#include "paddle/collective/algorithms/allreduce_cost_model.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: tuning_choices FILE LINK PIECE_BYTES N...\n");
    return 2;
  }
  absl::StatusOr<paddle::TuningParams> params = paddle::TuningParams::Load(argv[1]);
  if (!params.ok()) {
    std::fprintf(stderr, "%s\n", std::string(params.status().message()).c_str());
    return 2;
  }
  const int64_t piece = std::atoll(argv[3]);
  for (int i = 4; i < argc; ++i) {
    const int n = std::atoi(argv[i]);
    std::string entry;
    const paddle::LinkCost* link = params->Find(argv[2], n, &entry);
    if (link == nullptr) {
      std::fprintf(stderr, "%s has no link %s\n", argv[1], argv[2]);
      return 2;
    }
    for (int64_t bytes = 4096; bytes <= (int64_t{256} << 20); bytes *= 2) {
      const char* names[] = {"tree", "hd", "ring"};
      const auto choice = paddle::ModelAllreduceChoice(*link, n, bytes, piece);
      std::printf("%d %lld %s\n", n, static_cast<long long>(bytes),
                  names[static_cast<int>(choice)]);
    }
  }
  return 0;
}
