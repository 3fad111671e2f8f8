#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "kernels/onednn.h"

namespace cputrain::kernels {
namespace {

// (M, N, K, ta, lda, tb, ldb, ldc, bf16, alpha, beta)
using Key = std::tuple<int, int, int, bool, int, bool, int, int, bool, float, float>;

}  // namespace

struct OnednnGemm::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mu;
  struct Prim {
    dnnl::matmul prim;
    dnnl::memory::desc scratch;
  };
  std::map<Key, Prim> prims;
  std::string impl;

  void Run(int M, int N, int K, const void* A, bool ta, int lda, const void* B, bool tb, int ldb,
           float* C, int ldc, bool bf16, float alpha, float beta);
};

OnednnGemm::OnednnGemm() : state_(std::make_unique<State>()) {}
OnednnGemm::~OnednnGemm() = default;

void OnednnGemm::SetCallerThreads(int n) { omp_set_num_threads(n); }
bool OnednnGemm::Available() { return true; }

std::string OnednnGemm::Isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    default:
      return "another ISA";
  }
}

std::string OnednnGemm::Version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string OnednnGemm::impl() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->impl;
}

void OnednnGemm::RunBf16(int M, int N, int K, const uint16_t* A, bool ta, int lda,
                         const uint16_t* B, bool tb, int ldb, float* C, int ldc, bool add) {
  state_->Run(M, N, K, A, ta, lda, B, tb, ldb, C, ldc, true, 1.f, add ? 1.f : 0.f);
}

void OnednnGemm::RunF32(int M, int N, int K, const float* A, bool ta, int lda, const float* B,
                        bool tb, int ldb, float* C, int ldc, float alpha, float beta) {
  state_->Run(M, N, K, A, ta, lda, B, tb, ldb, C, ldc, false, alpha, beta);
}

void OnednnGemm::State::Run(int M, int N, int K, const void* A, bool ta, int lda, const void* B,
                            bool tb, int ldb, float* C, int ldc, bool bf16, float alpha,
                            float beta) {
  using dnnl::memory;
  const memory::data_type in = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::desc a({M, K}, in, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
  const memory::desc b({K, N}, in, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  const memory::desc c({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
  Prim p;
  {
    std::lock_guard<std::mutex> lock(mu);
    const Key key{M, N, K, ta, lda, tb, ldb, ldc, bf16, alpha, beta};
    auto it = prims.find(key);
    if (it == prims.end()) {
      // A scratchpad we pass in: with the library's own (global unless oneDNN was built with
      // DNNL_ENABLE_CONCURRENT_EXEC) two workers' concurrent calls returned wrong results here.
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (alpha != 1.f) attr.set_output_scales(0, {alpha});
      if (beta != 0.f) {
        dnnl::post_ops ops;
        ops.append_sum(beta);
        attr.set_post_ops(ops);
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
      impl = pd.impl_info_str();
      it = prims.emplace(key, Prim{dnnl::matmul(pd), pd.scratchpad_desc()}).first;
    }
    p = it->second;
  }
  thread_local std::vector<unsigned char> scratch;
  scratch.resize(std::max<std::size_t>(p.scratch.get_size(), 1));
  dnnl::stream stream(engine);
  memory am(a, engine, const_cast<void*>(A));
  memory bm(b, engine, const_cast<void*>(B));
  memory cm(c, engine, C);
  memory sm(p.scratch, engine, scratch.data());
  p.prim.execute(
      stream,
      {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
  stream.wait();
}

}  // namespace cputrain::kernels
