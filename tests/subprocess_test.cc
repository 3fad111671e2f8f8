// common/subprocess.h, the one process-spawning helper: stdin is fed, stdout and stderr come back
// apart, exit status and signal are told apart, env entries replace ours, a timeout kills, and a
// missing program is a RuntimeError naming it.
#include "common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <string>

#include "common/error.h"

namespace cputrain {
namespace {

TEST(Subprocess, FeedsStdinAndCapturesBothStreamsApart) {
  SubprocessOptions o;
  o.stdin_text = std::string(300000, 'x') + "\n";  // more than a pipe holds
  const SubprocessResult r = RunSubprocess({"sh", "-c", "wc -c; echo to-err >&2; exit 3"}, o);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.term_signal, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(std::stol(r.out), 300001);
  EXPECT_EQ(r.err, "to-err\n");
}

TEST(Subprocess, EnvEntriesReplaceOurs) {
  setenv("CPUTRAIN_SUBPROCESS_TEST", "ours", 1);
  SubprocessOptions o;
  o.env = {"CPUTRAIN_SUBPROCESS_TEST=theirs"};
  const SubprocessResult r = RunSubprocess({"sh", "-c", "env | grep ^CPUTRAIN_SUBPROCESS_TEST"}, o);
  EXPECT_EQ(r.out, "CPUTRAIN_SUBPROCESS_TEST=theirs\n");
}

TEST(Subprocess, SignalIsReportedAs128PlusItsNumber) {
  Subprocess p({"sleep", "30"});
  p.Signal(SIGTERM);
  const SubprocessResult r = p.Wait();
  EXPECT_EQ(r.term_signal, SIGTERM);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
}

TEST(Subprocess, TimeoutKillsTheChild) {
  SubprocessOptions o;
  o.timeout_seconds = 0.2;
  const SubprocessResult r = RunSubprocess({"sleep", "30"}, o);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.term_signal, SIGKILL);
}

TEST(Subprocess, MissingProgramIsARuntimeErrorNamingIt) {
  try {
    RunSubprocess({"/nonexistent/cputrain-no-such-program"});
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("cputrain-no-such-program"), std::string::npos);
  }
}

}  // namespace
}  // namespace cputrain
