// cputrain-numa: train transformer models (the families of src/model/families) on CPU servers,
// one replica group per socket.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/signals.h"
#include "common/error.h"
#include "common/log.h"
#include "common/spelling.h"
#include "model/family.h"

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

// The first word that is not an option (nor --log-level's value), if it names no subcommand:
// "unknown command 'trian'; did you mean 'train'?" beats CLI11's "A subcommand is required".
std::string UnknownCommand(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--log-level") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    for (const std::string& n : names) {
      if (n == a) return "";
    }
    const std::string best = cputrain::ClosestWord(a, names);
    return fmt::format("unknown command '{}'{}", a,
                       best.empty() ? "" : fmt::format("; did you mean '{}'?", best));
  }
  return "";
}

// The deepest subcommand the parser entered (`app` itself if none), whose --help describes the
// options that failed.
const CLI::App* Deepest(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->parsed()) return Deepest(*sub);
  }
  return &app;
}

// "prog train" for a failure inside `train`, "prog bench gemm" inside a bench suite.
std::string CommandPath(const CLI::App& app, const std::string& prog) {
  std::string path;
  for (const CLI::App* a = Deepest(app); a->get_parent(); a = a->get_parent())
    path = " " + a->get_name() + path;
  return prog + path;
}

// "unknown option '--tokns' for 'generate'; did you mean '--tokens'?": CLI11 says only "The
// following arguments were not expected: 5 --tokns", or first that a required option is missing.
// The first --word (before any '=') that is not an option of the deepest subcommand entered.
std::string UnknownOption(const CLI::App& app, int argc, char** argv) {
  const CLI::App* cmd = Deepest(app);
  std::vector<std::string> names;
  for (const CLI::Option* opt : cmd->get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() <= 2 || a.compare(0, 2, "--") != 0) continue;
    const std::string name = a.substr(0, a.find('='));
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    const std::string best = cputrain::ClosestWord(name, names);
    return fmt::format("unknown option '{}' for '{}'{}", name, cmd->get_name(),
                       best.empty() ? "" : fmt::format("; did you mean '{}'?", best));
  }
  return "";
}

// Sets the log level from its name; false for an unknown name.
bool SetLogLevel(const std::string& v) {
  using cputrain::log::Level;
  if (v != "error" && v != "warn" && v != "info" && v != "debug") return false;
  cputrain::log::SetLevel(v == "error"  ? Level::kError
                          : v == "warn" ? Level::kWarn
                          : v == "info" ? Level::kInfo
                                        : Level::kDebug);
  return true;
}

// --log-level on the program and every (sub)command, so it may come anywhere; applied as parsed,
// before any command's callback runs. (CPUTRAIN_LOG is read by main() before parsing, so the
// flag wins: CLI11's envname on options of several apps applied the environment last.)
void AddLogLevel(CLI::App* app) {
  app->add_option_function<std::string>(
         "--log-level", [](const std::string& v) { SetLogLevel(v); },
         "diagnostics to print on stderr: error, warn, info (default) or debug; the "
         "environment variable CPUTRAIN_LOG sets the same")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
  for (CLI::App* sub : app->get_subcommands({})) AddLogLevel(sub);
}

// An empty list's captured default ("=[]") says nothing: --help shows none.
void DropEmptyListDefaults(CLI::App* app) {
  for (CLI::Option* opt : app->get_options()) {
    if (opt->get_default_str() == "[]") opt->default_str("");
  }
  for (CLI::App* sub : app->get_subcommands({})) DropEmptyListDefaults(sub);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{fmt::format("cputrain-numa: NUMA-aware training of transformer models ({}) on CPU "
                           "servers",
                           cputrain::model::FamilyNames()),
               "cputrain-numa"};
  app.require_subcommand(1);
  // Every option's default appears in --help (inherited by the subcommands added below).
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", "cputrain-numa 0.1.0");
  cputrain::cli::AddTopoCommand(app);
  cputrain::cli::AddConfigCommand(app);
  cputrain::cli::AddBenchCommand(app);
  cputrain::cli::AddTrainCommand(app, ShellCommandLine(argc, argv));
  cputrain::cli::AddGenerateCommand(app);
  cputrain::cli::AddEvalCommand(app);
  cputrain::cli::AddPlotCommand(app);
  cputrain::cli::AddExportCommand(app);
  cputrain::cli::AddPlanCommand(app);
  cputrain::cli::AddReportCommand(app);
  cputrain::cli::AddPrepareDataCommand(app);
  cputrain::cli::AddTokenizeCommand(app);
  cputrain::cli::AddTaskCommands(app, ShellCommandLine(argc, argv));
  AddLogLevel(&app);
  DropEmptyListDefaults(&app);
  if (const char* env = std::getenv("CPUTRAIN_LOG"); env && !SetLogLevel(env)) {
    std::fprintf(stderr,
                 "error: CPUTRAIN_LOG='%s' is not a log level\nhint: set it to error, warn, "
                 "info or debug, or unset it\n",
                 env);
    return 2;
  }
  if (const std::string unknown = UnknownCommand(app, argc, argv); !unknown.empty()) {
    std::fprintf(stderr, "error: %s\nhint: run `%s --help` for the commands\n", unknown.c_str(),
                 argv[0]);
    return 2;
  }
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
    const std::string unknown = UnknownOption(app, argc, argv);
    std::fprintf(stderr, "error: %s\nhint: run `%s --help`\n",
                 unknown.empty() ? e.what() : unknown.c_str(), CommandPath(app, argv[0]).c_str());
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
