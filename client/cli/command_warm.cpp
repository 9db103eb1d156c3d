// kiln warm LIST [--arch "ARCH..."]: every spec of a spec list compiled (or fetched from the
// daemon's tiers) ahead of a roll-out, so that no client pays a compile later.
#include "client/cli/command.h"
#include "client/cli/spec_batch.h"

namespace kiln::cli {
namespace {

int RunWarm(Invocation& inv) {
  const int jobs = JobsOption(inv);  // every flag is checked before the list is read
  LoadedSpecs specs = LoadSpecTargets(inv.positionals()[0], ArchListOption(inv));
  const SpecBatchSummary summary = RunSpecBatch(inv, specs.targets, jobs, nullptr);
  inv.err << "kiln warm: " << summary.Text() << std::endl;
  return summary.failed > 0 ? kExitDaemonError : kExitOk;
}

}  // namespace

void AddWarmCommand(std::vector<CommandSpec>& commands) {
  CommandSpec c;
  c.path = "warm";
  c.arguments = "LIST";
  c.summary = "compile (or fetch from the daemon's tiers) every spec of a spec list";
  c.details = "LIST holds one spec a line: `OP KEY=VALUE... [@ARCH...]` ('#' starts a comment; `kiln cache\n"
              "export-list` writes one from a warm daemon). Each spec is asked for each --arch, or for its\n"
              "own @ARCH targets without --arch. The daemon's jobs show in `kiln jobs watch`. Progress: a bar\n"
              "on a terminal, else one JSON line per spec on stdout; then a summary (how many were compiled,\n"
              "came from memory, disk or a prebuilt bundle, failed and why). Exits with 1 when any failed.\n\n"
              "Example:\n"
              "  kiln warm llama.list --arch sm_90a --jobs 8";
  c.options = SpecBatchOptions();
  c.min_positionals = 1;
  c.max_positionals = 1;
  c.run = RunWarm;
  commands.push_back(std::move(c));
}

}  // namespace kiln::cli
