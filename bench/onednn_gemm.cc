#include "bench/onednn_gemm.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

namespace cputrain::bench {

using Key = std::tuple<int, int, int, bool, int, bool, int, int>;

struct OnednnBf16Gemm::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mu;
  struct Prim {
    dnnl::matmul prim;
    dnnl::memory::desc scratch;
  };
  std::map<Key, Prim> prims;
  std::string impl;
};

OnednnBf16Gemm::OnednnBf16Gemm() : state_(std::make_unique<State>()) {}
OnednnBf16Gemm::~OnednnBf16Gemm() = default;

void OnednnBf16Gemm::SetCallerThreads(int n) { omp_set_num_threads(n); }
bool OnednnBf16Gemm::Available() { return true; }

std::string OnednnBf16Gemm::impl() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->impl;
}

void OnednnBf16Gemm::Run(int M, int N, int K, const uint16_t* A, bool ta, int lda,
                         const uint16_t* B, bool tb, int ldb, float* C, int ldc) {
  using dnnl::memory;
  const memory::desc a({M, K}, memory::data_type::bf16,
                       ta ? memory::dims{1, lda} : memory::dims{lda, 1});
  const memory::desc b({K, N}, memory::data_type::bf16,
                       tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  const memory::desc c({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
  State::Prim p;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    const Key key{M, N, K, ta, lda, tb, ldb, ldc};
    auto it = state_->prims.find(key);
    if (it == state_->prims.end()) {
      // A scratchpad we pass in: with the library's own (global unless oneDNN was built with
      // DNNL_ENABLE_CONCURRENT_EXEC) two workers' concurrent calls returned wrong results here.
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, state_->engine);
      state_->impl = pd.impl_info_str();
      it = state_->prims.emplace(key, State::Prim{dnnl::matmul(pd), pd.scratchpad_desc()}).first;
    }
    p = it->second;
  }
  thread_local std::vector<unsigned char> scratch;
  scratch.resize(std::max<std::size_t>(p.scratch.get_size(), 1));
  dnnl::stream stream(state_->engine);
  memory am(a, state_->engine, const_cast<uint16_t*>(A));
  memory bm(b, state_->engine, const_cast<uint16_t*>(B));
  memory cm(c, state_->engine, C);
  memory sm(p.scratch, state_->engine, scratch.data());
  p.prim.execute(
      stream,
      {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
  stream.wait();
}

}  // namespace cputrain::bench
