// cuda_allreduce_bench without CUDA (`--config=nocuda`): says so and fails.
#include <cstdio>

int main() {
  std::printf("cuda_allreduce_bench: built without CUDA (--config=nocuda); build it with CUDA\n");
  return 1;
}
