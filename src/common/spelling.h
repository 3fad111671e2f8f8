// "Did you mean ...?": the closest of a list of valid words to a misspelled one, by edit
// distance. Used for config keys (config.cc) and subcommand names (cli/main.cc).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace cputrain {

// Levenshtein distance: insertions, deletions and substitutions, one each.
std::size_t EditDistance(const std::string& a, const std::string& b);

// The word of `valid` closest to `got` if it is within 2 edits (a typo, not another word),
// else "". The first of equally close words wins.
std::string ClosestWord(const std::string& got, const std::vector<std::string>& valid);

}  // namespace cputrain
