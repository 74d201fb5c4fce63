// ScopedEnv: sets (or, with a null value, unsets) an environment variable for one scope and
// restores what was there before when the scope ends. Tests only: setenv is not thread-safe, so
// no other thread may read the environment meanwhile.
#ifndef TESTS_TESTING_SCOPED_ENV_H_
#define TESTS_TESTING_SCOPED_ENV_H_

#include <cstdlib>
#include <string>

namespace paddle {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_old_ = old != nullptr;
    if (had_old_) old_ = old;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (had_old_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::string old_;
  bool had_old_ = false;
};

}  // namespace paddle

#endif  // TESTS_TESTING_SCOPED_ENV_H_
