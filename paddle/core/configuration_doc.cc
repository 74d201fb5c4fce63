// Prints docs/configuration.md, generated from the settings table (Note [Settings table]).
#include <cstdio>
#include <string>

#include "paddle/core/settings.h"

int main() {
  const std::string doc = paddle::ConfigurationMarkdown();
  return std::fwrite(doc.data(), 1, doc.size(), stdout) == doc.size() ? 0 : 1;
}
