// model/ internal: reading Hugging Face config.json keys for the families' from_hf_config, each
// refusal an InputError naming the file, the key and what this engine runs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cputrain::model::hf {

[[noreturn]] void BadConfig(const std::string& path, const std::string& what,
                            const std::string& hint);
// An integer key in [1, max] (missing: InputError, unless `fallback` is given >= 1).
int IntKey(const nlohmann::json& cfg, const std::string& key, const std::string& path, int max,
           int fallback = 0);
// A positive finite number (missing: fallback).
double FloatKey(const nlohmann::json& cfg, const std::string& key, const std::string& path,
                double fallback);
// A boolean (missing or null: fallback).
bool BoolKey(const nlohmann::json& cfg, const std::string& key, const std::string& path,
             bool fallback);
// A key this engine implements one way only: absent, null, or one of `ok`.
void FixedKey(const nlohmann::json& cfg, const std::string& key,
              const std::vector<nlohmann::json>& ok, const std::string& path,
              const std::string& family);

}  // namespace cputrain::model::hf
