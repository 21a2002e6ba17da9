#include "cli/serve/model_spec.hpp"

#include <algorithm>
#include <map>
#include <system_error>

namespace waste::serve {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxIdChars = 128;
constexpr std::string_view kIdRule = "1 to 128 of A-Z a-z 0-9 . _ : - /, not starting with / or .";

bool is_container(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "manifest.json", ec);
}

Error spec_error(std::string_view spec, const std::string& what) {
  return Error{Errc::argument, "--model '" + std::string(spec) + "': " + what};
}

// One --model value → its models (several for a directory of containers).
Result<std::vector<ModelSpec>> expand_one(std::string_view spec) {
  if (spec.empty()) return std::unexpected(spec_error(spec, "empty (use --model PATH or --model PATH=ID)"));
  std::error_code ec;
  fs::path path{std::string(spec)};
  std::string id;
  bool named = false;
  // PATH=ID splits at the last '=', unless the whole text is a path that exists.
  if (const std::size_t eq = spec.rfind('='); eq != std::string_view::npos && !fs::exists(path, ec)) {
    if (eq == 0) return std::unexpected(spec_error(spec, "no path before '='"));
    path = fs::path(std::string(spec.substr(0, eq)));
    id = std::string(spec.substr(eq + 1));
    named = true;
    if (id.empty()) return std::unexpected(spec_error(spec, "empty id after '='"));
    if (!valid_model_id(id)) {
      return std::unexpected(spec_error(spec, "'" + id + "' is not a valid model id (" + std::string(kIdRule) + ")"));
    }
  }
  if (!fs::exists(path, ec)) return std::unexpected(spec_error(spec, path.string() + " does not exist"));
  if (!fs::is_directory(path, ec)) {
    return std::unexpected(
        spec_error(spec, path.string() + " is not a directory (a model is a container directory holding manifest.json)"));
  }
  if (is_container(path)) {
    if (!named) {
      id = default_model_id(path);
      if (!valid_model_id(id)) {
        return std::unexpected(spec_error(spec, "the folder name '" + id + "' is not a valid model id (" +
                                                    std::string(kIdRule) + "); name it with --model " +
                                                    path.string() + "=ID"));
      }
    }
    return std::vector<ModelSpec>{{path, id}};
  }
  // A directory of containers: each subfolder holding manifest.json, by folder name.
  std::vector<fs::path> found;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, ec)) {
    std::error_code dir_ec;
    if (entry.is_directory(dir_ec) && is_container(entry.path())) found.push_back(entry.path());
  }
  if (ec) return std::unexpected(spec_error(spec, path.string() + ": " + ec.message()));
  if (found.empty()) {
    return std::unexpected(spec_error(
        spec, path.string() + " is neither a container (no manifest.json) nor a directory holding containers"));
  }
  if (named) {
    return std::unexpected(spec_error(spec, path.string() + " is a directory of containers; an id names one container "
                                                            "(give it as --model " +
                                                            path.string() + "/NAME=ID)"));
  }
  std::sort(found.begin(), found.end());
  std::vector<ModelSpec> out;
  for (const fs::path& container : found) {
    const std::string child_id = default_model_id(container);
    if (!valid_model_id(child_id)) {
      return std::unexpected(spec_error(spec, "the folder name '" + child_id + "' is not a valid model id (" +
                                                  std::string(kIdRule) + "); name it with --model " +
                                                  container.string() + "=ID"));
    }
    out.push_back({container, child_id});
  }
  return out;
}

}  // namespace

std::string default_model_id(const fs::path& container) {
  std::string name = container.filename().string();
  if (name.empty()) name = container.parent_path().filename().string();  // "dir/"
  constexpr std::string_view kSuffix = ".waste";
  if (name.size() > kSuffix.size() && name.ends_with(kSuffix)) name.resize(name.size() - kSuffix.size());
  return name;
}

bool valid_model_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxIdChars || id.front() == '/' || id.front() == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == ':' || c == '-' || c == '/';
  });
}

Result<std::vector<ModelSpec>> expand_model_specs(const std::vector<std::string>& specs) {
  std::vector<ModelSpec> out;
  std::map<std::string, std::size_t> by_id;         // id -> index in out
  std::map<fs::path, std::size_t> by_container;     // canonical directory -> index in out
  for (const std::string& spec : specs) {
    auto models = expand_one(spec);
    if (!models) return std::unexpected(models.error());
    for (ModelSpec& model : *models) {
      if (auto it = by_id.find(model.id); it != by_id.end()) {
        return make_error(Errc::argument, "--model: id '" + model.id + "' names two models (" +
                                              out[it->second].path.string() + " and " + model.path.string() +
                                              "); give one another id with --model PATH=ID");
      }
      std::error_code ec;
      fs::path canonical = fs::weakly_canonical(model.path, ec);
      if (ec) canonical = model.path.lexically_normal();
      if (auto it = by_container.find(canonical); it != by_container.end()) {
        return make_error(Errc::argument, "--model: " + canonical.string() + " is given twice (as '" +
                                              out[it->second].id + "' and '" + model.id + "')");
      }
      by_id.emplace(model.id, out.size());
      by_container.emplace(std::move(canonical), out.size());
      out.push_back(std::move(model));
    }
  }
  return out;
}

}  // namespace waste::serve
