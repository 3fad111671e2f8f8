// tests/netns/mpi_probe.c: the MPI program selftest.sh runs across the two namespaces.
// Built by selftest.sh with `mpicc -O2 -Wall -Wextra -Werror` into a temporary directory.
//
//   mpi_probe check [IFACE]      where each rank runs, then MPI_Allreduce correctness against
//                                closed-form sums, then proof that a 16 MiB allreduce crossed
//                                IFACE (default ctn0): its tx and rx byte counters, read from
//                                /sys/class/net/IFACE/statistics in each rank's namespace.
//                                Exit code 0 iff every check passed on every rank.
//   mpi_probe bandwidth MIB...   MPI_Allreduce of MIB MiB of float, sum: time per call (the
//                                slowest rank's), median of the repetitions, and GB/s.
//   mpi_probe loop [RANK exit|abort|abort-thread|exit-thread S]
//                                1 MiB allreduces forever, errors returned rather than fatal
//                                (MPI_ERRORS_RETURN): the job of the fault experiments.
//                                Prints "ready rank=R pid=P" once per rank. With the fault
//                                arguments, rank RANK leaves after S seconds by exit(1)
//                                (no MPI_Finalize) or MPI_Abort, from the main thread between
//                                two allreduces or (-thread) from a second thread, as the
//                                bridge's watchdog does.
//
// Every line a rank prints starts with "probe: rank R" and is flushed at once.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <mpi.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_rank = -1, g_size = 0, g_failures = 0;

static void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("probe: rank %d ", g_rank);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
}

// A check of this rank's own state, printed by this rank.
static void check(int ok, const char* what) {
  say("%s %s", ok ? "PASS" : "FAIL", what);
  if (!ok) g_failures++;
}

// A check whose verdict all ranks already agree on (a collective's result): printed once.
static void check_agreed(int ok, const char* what) {
  if (g_rank == 0) say("%s %s", ok ? "PASS" : "FAIL", what);
  if (!ok && g_rank == 0) g_failures++;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "probe: out of memory (%zu bytes)\n", bytes);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return p;
}

// The IPv4 address of IFACE in this rank's namespace, or "none".
static void iface_ip(const char* iface, char* out, size_t n) {
  struct ifaddrs *ifs = NULL, *it;
  snprintf(out, n, "none");
  if (getifaddrs(&ifs) != 0) return;
  for (it = ifs; it; it = it->ifa_next) {
    if (it->ifa_addr && it->ifa_addr->sa_family == AF_INET && strcmp(it->ifa_name, iface) == 0) {
      inet_ntop(AF_INET, &((struct sockaddr_in*)it->ifa_addr)->sin_addr, out, (socklen_t)n);
      break;
    }
  }
  freeifaddrs(ifs);
}

// /sys/class/net/IFACE/statistics/WHICH (rx_bytes, tx_bytes), or -1. `ip netns exec` mounts a
// /sys of the namespace, so this is the namespace's own interface.
static int64_t iface_counter(const char* iface, const char* which) {
  char path[256];
  long long v = -1;
  snprintf(path, sizeof path, "/sys/class/net/%s/statistics/%s", iface, which);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  if (fscanf(f, "%lld", &v) != 1) v = -1;
  fclose(f);
  return (int64_t)v;
}

// Rank r contributes (r + 1) * (i % 97 + 1) at index i, so the sum over n ranks is
// n (n + 1) / 2 * (i % 97 + 1): small integers, exact in float and int.
static int check_allreduce(MPI_Datatype type, size_t count, int in_place) {
  const int n = g_size;
  const long long tri = (long long)n * (n + 1) / 2;
  int ok = 1;
  if (type == MPI_INT) {
    int *in = xmalloc(count * sizeof(int)), *out = xmalloc(count * sizeof(int));
    for (size_t i = 0; i < count; i++) in[i] = (g_rank + 1) * (int)(i % 97 + 1);
    if (in_place) memcpy(out, in, count * sizeof(int));
    MPI_Allreduce(in_place ? MPI_IN_PLACE : in, out, (int)count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (size_t i = 0; i < count && ok; i++) ok = out[i] == (int)(tri * (long long)(i % 97 + 1));
    free(in);
    free(out);
  } else {
    float *in = xmalloc(count * sizeof(float)), *out = xmalloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++) in[i] = (float)((g_rank + 1) * (int)(i % 97 + 1));
    if (in_place) memcpy(out, in, count * sizeof(float));
    MPI_Allreduce(in_place ? MPI_IN_PLACE : in, out, (int)count, MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    for (size_t i = 0; i < count && ok; i++) ok = out[i] == (float)(tri * (long long)(i % 97 + 1));
    free(in);
    free(out);
  }
  // Every rank must agree: a rank that got a wrong answer fails the case everywhere.
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all_ok;
}

static int run_check(const char* iface) {
  enum { kField = 64 };
  char host[MPI_MAX_PROCESSOR_NAME] = {0}, ns[kField] = {0}, ip[kField] = {0};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  ssize_t got = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  if (got < 0) snprintf(ns, sizeof ns, "unknown");
  iface_ip(iface, ip, sizeof ip);
  say("host=%s netns=%s %s=%s pid=%d", host, ns, iface, ip, (int)getpid());

  // Where every rank runs, on every rank: each rank's (namespace, address) pair.
  char mine[2 * kField] = {0}, *all = xmalloc((size_t)g_size * sizeof mine);
  snprintf(mine, sizeof mine, "%s %s", ns, ip);
  MPI_Allgather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, MPI_COMM_WORLD);
  int distinct_ns = 1, distinct_ip = 1, have_ip = strcmp(ip, "none") != 0;
  for (int a = 0; a < g_size; a++) {
    for (int b = a + 1; b < g_size; b++) {
      const char *ea = all + (size_t)a * sizeof mine, *eb = all + (size_t)b * sizeof mine;
      size_t na = strcspn(ea, " "), nb = strcspn(eb, " ");
      if (na == nb && strncmp(ea, eb, na) == 0) distinct_ns = 0;
      if (strcmp(ea + na, eb + nb) == 0) distinct_ip = 0;
    }
  }
  free(all);
  check(have_ip, "this rank has an address on the harness interface");
  check(distinct_ns, "every rank runs in its own network namespace");
  check(distinct_ip, "every rank has its own address");

  // Closed-form sums over sizes 0, 1, small, uneven and large; in place and out of place.
  const size_t counts[] = {0, 1, 7, 1000, 65537, (1u << 20) + 3};
  char what[128];
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    for (int in_place = 0; in_place <= 1; in_place++) {
      for (int t = 0; t < 2; t++) {
        MPI_Datatype type = t ? MPI_FLOAT : MPI_INT;
        snprintf(what, sizeof what, "allreduce sum %s count=%zu %s", t ? "float" : "int", counts[c],
                 in_place ? "in-place" : "out-of-place");
        check_agreed(check_allreduce(type, counts[c], in_place), what);
      }
    }
  }

  // Traffic: a 16 MiB allreduce between two ranks moves at least half of it each way over
  // the wire (reduce-scatter + allgather: N/2 each way each phase; recursive doubling: N).
  const size_t bytes = 16u << 20;
  const int64_t tx0 = iface_counter(iface, "tx_bytes"), rx0 = iface_counter(iface, "rx_bytes");
  MPI_Barrier(MPI_COMM_WORLD);
  int ok = check_allreduce(MPI_FLOAT, bytes / sizeof(float), 0);
  const int64_t tx = iface_counter(iface, "tx_bytes") - tx0;
  const int64_t rx = iface_counter(iface, "rx_bytes") - rx0;
  say("%s: tx %" PRId64 " bytes, rx %" PRId64 " bytes during a %zu-byte allreduce", iface, tx, rx,
      bytes);
  check_agreed(ok, "16 MiB allreduce sum");
  snprintf(what, sizeof what, "the 16 MiB allreduce crossed %s (tx and rx >= 8 MiB)", iface);
  check(tx0 >= 0 && tx >= (int64_t)bytes / 2 && rx >= (int64_t)bytes / 2, what);

  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0)
    say("%s: %d failed check(s) over all ranks", failures ? "FAILED" : "OK", failures);
  return failures ? 1 : 0;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int run_bandwidth(int argc, char** argv) {
  for (int a = 0; a < argc; a++) {
    const double mib = atof(argv[a]);
    const size_t count = (size_t)(mib * 1048576.0 / sizeof(float));
    if (count == 0 || count > 1u << 30) {
      say("bad size '%s' (MiB, > 0)", argv[a]);
      return 2;
    }
    float *in = xmalloc(count * sizeof(float)), *out = xmalloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++) in[i] = 1.0f;
    // Two warm-up calls touch every page and open every connection; then at least 5
    // repetitions and at least ~2 s of them.
    for (int w = 0; w < 2; w++)
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    enum { kMaxReps = 200 };
    double times[kMaxReps];
    int reps = 0;
    double spent = 0;
    int go = 1;
    while (go) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now_s();
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = now_s() - t0, slowest = 0;
      MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times[reps++] = slowest;
      spent += slowest;
      go = reps < kMaxReps && (reps < 5 || spent < 2.0);  // same on every rank: slowest is
    }
    const float want = (float)g_size;
    int ok = out[0] == want && out[count - 1] == want;
    qsort(times, (size_t)reps, sizeof times[0], cmp_double);
    const double med = times[reps / 2];
    if (g_rank == 0)
      say("allreduce %.0f MiB float sum: median %.2f ms (min %.2f, max %.2f, %d reps), "
          "%.2f GB/s (bytes / time)%s",
          mib, 1e3 * med, 1e3 * times[0], 1e3 * times[reps - 1], reps,
          (double)(count * sizeof(float)) / med / 1e9, ok ? "" : " WRONG SUM");
    free(in);
    free(out);
    if (!ok) return 1;
  }
  return 0;
}

static void say_leaving(const char* how, long iterations) {
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);  // the selftest times mpirun's reaction from here
  say("leaving by %s after %ld iterations at %lld.%03ld", how, iterations, (long long)wall.tv_sec,
      wall.tv_nsec / 1000000);
}

// The bridge's watchdog in miniature: a thread that calls MPI_Abort after a delay, whatever the
// main thread is blocked in (needs MPI_THREAD_MULTIPLE).
static double g_thread_after = 0;
static int g_thread_exits = 0;  // 1: exit(1) instead of MPI_Abort
static void* abort_thread(void* arg) {
  (void)arg;
  const double after = g_thread_after;
  struct timespec ts = {(time_t)after, (long)((after - (double)(time_t)after) * 1e9)};
  nanosleep(&ts, NULL);
  say_leaving(g_thread_exits ? "exit(1) from a thread" : "MPI_Abort from a thread", -1);
  if (g_thread_exits) exit(1);
  MPI_Abort(MPI_COMM_WORLD, 1);
  return NULL;
}

// Allreduces of 1 MiB until killed. With FAULT = "RANK exit|abort|abort-thread|exit-thread
// SECONDS", rank RANK leaves after SECONDS: exit(1) without MPI_Finalize (what an error exit
// looks like to mpirun) or MPI_Abort(MPI_COMM_WORLD, 1) between two allreduces, or either one
// from a second thread while the main thread may be stuck in an allreduce (what the bridge's
// watchdog does).
static int run_loop(int argc, char** argv) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int fault_rank = -1, fault_abort = 0;
  double fault_after = 0;
  if (argc == 3) {
    fault_rank = atoi(argv[0]);
    fault_abort = strcmp(argv[1], "abort") == 0;
    fault_after = atof(argv[2]);
    if (strcmp(argv[1], "abort-thread") == 0 || strcmp(argv[1], "exit-thread") == 0) {
      if (g_rank == fault_rank) {
        g_thread_after = fault_after;
        g_thread_exits = strcmp(argv[1], "exit-thread") == 0;
        pthread_t t;
        pthread_create(&t, NULL, abort_thread, NULL);
        pthread_detach(t);
      }
      fault_rank = -1;  // the thread does it
    }
  }
  const size_t count = (1u << 20) / sizeof(float);
  float *in = xmalloc(count * sizeof(float)), *out = xmalloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) in[i] = 1.0f;
  const double t0 = now_s();
  for (long it = 0;; it++) {
    int rc = MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      say("MPI_Allreduce returned an error at iteration %ld: %s", it, msg);
      return 3;
    }
    if (it == 0) say("ready rank=%d pid=%d", g_rank, (int)getpid());
    if (g_rank == fault_rank && now_s() - t0 >= fault_after) {
      say_leaving(fault_abort ? "MPI_Abort" : "exit(1)", it + 1);
      if (fault_abort) MPI_Abort(MPI_COMM_WORLD, 1);
      exit(1);
    }
  }
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  int rc = 2;
  if (argc >= 2 && strcmp(argv[1], "check") == 0) {
    rc = run_check(argc >= 3 ? argv[2] : "ctn0");
  } else if (argc >= 3 && strcmp(argv[1], "bandwidth") == 0) {
    rc = run_bandwidth(argc - 2, argv + 2);
  } else if ((argc == 2 || argc == 5) && strcmp(argv[1], "loop") == 0) {
    rc = run_loop(argc - 2, argv + 2);
  } else if (g_rank == 0) {
    fprintf(stderr,
            "usage: mpi_probe check [IFACE] | bandwidth MIB... | loop [RANK "
            "exit|abort|abort-thread|exit-thread S]\n");
  }
  MPI_Finalize();
  return rc;
}
