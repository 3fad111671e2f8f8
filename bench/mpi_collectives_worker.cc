// cputrain-bench-mpi: the Open MPI side of `cputrain-numa bench collectives`. Started by the
// bench through mpirun (one rank per group, shared-memory transport); times MPI_Allreduce,
// MPI_Reduce_scatter_block and MPI_Allgather on fp32 exactly as the bench times ours: buffers
// allocated and touched once, warm-up, then repetitions each starting after an MPI_Barrier, a
// repetition's time being (last rank's end - first rank's start) on CLOCK_MONOTONIC, the median
// reported. Rank 0 prints one JSON object per (op, size) on stdout:
//   {"op": "allreduce", "bytes": 1048576, "seconds": 0.00031, "reps": 40}
//
// Usage: cputrain-bench-mpi --sizes B1,B2,... --ops allreduce,reduce_scatter,allgather
//                           [--target-seconds S] [--min-reps N] [--max-reps N]
// Not meant to be run by hand (but it can be, under mpirun).
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/stats.h"

namespace {

using cputrain::bench::Median;

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

int Fail(const char* msg) {
  std::fprintf(stderr, "cputrain-bench-mpi: %s\n", msg);
  MPI_Abort(MPI_COMM_WORLD, 2);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  std::vector<unsigned long long> sizes;
  std::vector<std::string> ops;
  double target_seconds = 0.25;
  int min_reps = 5, max_reps = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--sizes") {
      for (const std::string& s : Split(value))
        sizes.push_back(std::strtoull(s.c_str(), nullptr, 10));
    } else if (key == "--ops") {
      ops = Split(value);
    } else if (key == "--target-seconds") {
      target_seconds = std::atof(value.c_str());
    } else if (key == "--min-reps") {
      min_reps = std::atoi(value.c_str());
    } else if (key == "--max-reps") {
      max_reps = std::atoi(value.c_str());
    } else {
      return Fail(("unknown option " + key).c_str());
    }
  }
  if (sizes.empty() || ops.empty()) return Fail("need --sizes and --ops");
  const std::size_t max_n = *std::max_element(sizes.begin(), sizes.end()) / sizeof(float);
  // Allocated and touched once, like the bench's own buffers; index-dependent values so that no
  // two pages are equal (identical pages may be merged by the host and then stay in cache).
  std::vector<float> send(max_n), recv(max_n);
  for (std::size_t i = 0; i < max_n; ++i) {
    send[i] = static_cast<float>(rank + 1) + static_cast<float>(i);
    recv[i] = -static_cast<float>(i);
  }

  for (const std::string& op : ops) {
    for (unsigned long long bytes : sizes) {
      const int n = static_cast<int>(bytes / sizeof(float));
      const int block = n / ranks;  // reduce-scatter / allgather: per-rank count
      auto run = [&] {
        if (op == "allreduce") {
          MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else if (op == "reduce_scatter") {
          MPI_Reduce_scatter_block(send.data(), recv.data(), block, MPI_FLOAT, MPI_SUM,
                                   MPI_COMM_WORLD);
        } else if (op == "allgather") {
          MPI_Allgather(send.data(), block, MPI_FLOAT, recv.data(), block, MPI_FLOAT,
                        MPI_COMM_WORLD);
        }
      };
      if (op != "allreduce" && op != "reduce_scatter" && op != "allgather") {
        return Fail(("unknown op " + op).c_str());
      }
      // Warm-up (2 calls), then one timed call to choose the repetition count (rank 0 decides).
      for (int w = 0; w < 2; ++w) run();
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = Now();
      run();
      double t1 = Now(), first = 0, last = 0;
      MPI_Reduce(&t0, &first, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
      MPI_Reduce(&t1, &last, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      int reps = min_reps;
      if (rank == 0) {
        const double est = std::max(last - first, 1e-7);
        reps = std::clamp(static_cast<int>(target_seconds / est), min_reps, max_reps);
      }
      MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
      std::vector<double> starts(static_cast<std::size_t>(reps)), ends(starts.size());
      for (int r = 0; r < reps; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        starts[static_cast<std::size_t>(r)] = Now();
        run();
        ends[static_cast<std::size_t>(r)] = Now();
      }
      std::vector<double> min_start(starts.size()), max_end(ends.size());
      MPI_Reduce(starts.data(), min_start.data(), reps, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
      MPI_Reduce(ends.data(), max_end.data(), reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        std::vector<double> times(starts.size());
        for (std::size_t r = 0; r < times.size(); ++r) times[r] = max_end[r] - min_start[r];
        const unsigned long long moved =
            op == "allreduce" ? bytes : static_cast<unsigned long long>(block) * ranks * 4;
        std::printf("{\"op\": \"%s\", \"bytes\": %llu, \"seconds\": %.9g, \"reps\": %d}\n",
                    op.c_str(), moved, Median(times), reps);
        std::fflush(stdout);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
