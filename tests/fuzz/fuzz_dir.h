// Helpers of the fuzz targets whose input is a directory of files (an adapter directory, a
// sharded Hugging Face directory): the files are cut from the one input and written into a
// scratch directory in memory (/dev/shm when there is one), the same directory for every input
// of the process, removed at exit. And the tiny models those targets load against, which
// tests/fuzz/make_seeds.cc writes their seeds for.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "model/shape.h"

namespace cputrain::fuzz {

class ScratchDir {
 public:
  // The process's directory, emptied.
  static ScratchDir& Fresh() {
    static ScratchDir dir;
    for (const auto& e : std::filesystem::directory_iterator(dir.path_)) {
      std::filesystem::remove_all(e.path());
    }
    return dir;
  }
  const std::string& path() const { return path_; }
  void Write(const std::string& name, std::string_view bytes) const {
    std::ofstream f(path_ + "/" + name, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) std::abort();  // not a finding about the input: the harness cannot run
  }

 private:
  ScratchDir() {
    const char* base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/cputrain-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~ScratchDir() {  // at exit (the object is a function's static)
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path_;
};

// Splits `in` at its first NUL: the part before (a JSON file's text, which holds no NUL) and
// the part after; no NUL: all of it is the first part, and `second` is false.
struct Split {
  std::string_view first, rest;
  bool second = false;
};
inline Split SplitAtNul(std::string_view in) {
  const std::size_t nul = in.find('\0');
  if (nul == std::string_view::npos) return {in, {}, false};
  return {in.substr(0, nul), in.substr(nul + 1), true};
}

// The tiny models: a Llama (grouped-query attention, tied embedding) and a GPT-2 (Conv1D
// weights, stored transposed), small enough that a whole directory of weights is a few KB.
inline model::Shape TinyLlama() {
  model::Shape s(8, 16, model::Shape::PadVocab(16), 1, 2, 8);  // maxT, V, Vp, L, NH, C
  s.arch = model::Arch::kLlama;
  s.NKV = 1;
  s.F = 16;
  s.tied = true;
  return s;
}
inline model::Shape TinyGpt2() { return model::Shape(8, 16, model::Shape::PadVocab(16), 1, 2, 8); }

}  // namespace cputrain::fuzz
