// cputrain-numa: train GPT-2 on CPU servers, one replica group per socket.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/signals.h"
#include "common/error.h"

namespace {

// argv as a shell would need it typed back: words with anything but [A-Za-z0-9_./=:,+@%-] in
// single quotes.
std::string ShellCommandLine(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmn"
                                         "opqrstuvwxyz0123456789_./=:,+@%-") == std::string::npos;
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += (i ? " " : "") + (plain ? a : quoted + "'");
  }
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cputrain-numa: NUMA-aware GPT-2 training on CPU servers", "cputrain-numa"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cputrain-numa 0.1.0");
  cputrain::cli::AddTopoCommand(app);
  cputrain::cli::AddConfigCommand(app);
  cputrain::cli::AddBenchCommand(app);
  cputrain::cli::AddTrainCommand(app, ShellCommandLine(argc, argv));
  cputrain::cli::AddGenerateCommand(app);
  cputrain::cli::AddEvalCommand(app);
  cputrain::cli::AddPlotCommand(app);
  cputrain::cli::AddExportCommand(app);
  cputrain::cli::AddReportCommand(app);
  cputrain::cli::AddPrepareDataCommand(app);
  try {
    app.parse(argc, argv);
    return 0;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\nhint: run `%s --help`\n", e.what(), argv[0]);
    return 2;
  } catch (const cputrain::cli::StopExit& e) {
    std::fprintf(stderr, "%s\n", e.message().c_str());
    return e.code();
  } catch (const cputrain::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    if (!e.hint().empty()) std::fprintf(stderr, "hint: %s\n", e.hint().c_str());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
