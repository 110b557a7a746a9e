#include "model/arch/family.h"

#include <iterator>
#include <string>

namespace tokenmill {
namespace {

constexpr const ModelFamily* kFamilies[] = {&kLlamaFamily, &kQwen2Family};

// "'llama' and 'qwen2'": the names of the families, for the refusal.
std::string FamilyNames() {
  std::string names;
  constexpr size_t kCount = std::size(kFamilies);
  for (size_t i = 0; i < kCount; ++i) {
    if (i > 0) names += i + 1 < kCount ? ", " : " and ";
    names.append("'").append(kFamilies[i]->name).append("'");
  }
  return names;
}

}  // namespace

StatusOr<const ModelFamily*> FindModelFamily(const GgufFile& file) {
  TM_ASSIGN_OR_RETURN(std::string_view arch, file.GetString("general.architecture"));
  for (const ModelFamily* family : kFamilies) {
    if (family->name == arch) return family;
  }
  return UnimplementedError("architecture '" + std::string(arch) +
                            "' is not supported; tokenmill runs " + FamilyNames() + " models");
}

}  // namespace tokenmill
