// kiln ops [OP]: the ops the daemon serves (KernelService.ListOps) as a table, proto3 JSON or
// Markdown; and `kiln get OP --help`, one op's params from the same reply.
#include <grpcpp/grpcpp.h>

#include <ostream>

#include "client/cli/command.h"
#include "client/cli/op_reference.h"
#include "client/cli/output.h"
#include "client/core/rpc/daemon_connection.h"
#include "kiln/v1/kernel.grpc.pb.h"

namespace kiln::cli {
namespace {

// ListOps for `name` (empty: every op).
Status ListOps(Invocation& inv, const std::string& name, v1::ListOpsResponse* reply) {
  v1::ListOpsRequest request;
  request.set_name(name);
  auto stub = v1::KernelService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  grpc::Status status = stub->ListOps(&context, request, reply);
  if (!status.ok()) return inv.Connection().Explain(status, name.empty() ? "ListOps" : "ListOps " + name);
  return OkStatus();
}

int RunOps(Invocation& inv) {
  if (inv.Has("--json") && inv.Has("--markdown")) throw UsageError("--json and --markdown exclude each other");
  v1::ListOpsResponse reply;
  const std::string name = inv.positionals().empty() ? "" : inv.positionals()[0];
  if (Status s = ListOps(inv, name, &reply); !s.ok()) return inv.Fail(s);
  if (inv.Has("--json")) {
    inv.out << ToJson(reply) << std::endl;
  } else if (inv.Has("--markdown")) {
    PrintOpsMarkdown(inv.out, reply);
  } else {
    PrintOpsTable(inv.out, reply);
  }
  return kExitOk;
}

}  // namespace

int RunOpHelp(Invocation& inv) {
  v1::ListOpsResponse reply;
  if (Status s = ListOps(inv, inv.positionals()[0], &reply); !s.ok()) return inv.Fail(s);
  if (reply.ops_size() != 1)
    return inv.Fail(Status(StatusCode::kInternal, "ListOps " + inv.positionals()[0] + " answered " +
                                                      std::to_string(reply.ops_size()) + " ops instead of one"));
  if (inv.Has("--json")) {
    inv.out << ToJson(reply.ops(0)) << std::endl;
  } else {
    PrintOpHelp(inv.out, reply.ops(0));
  }
  return kExitOk;
}

void AddOpsCommand(std::vector<CommandSpec>& commands) {
  CommandSpec c;
  c.path = "ops";
  c.arguments = "[OP]";
  c.summary = "list the ops the daemon serves: params, arch families, trace definitions";
  c.details = "One row per op (or only OP): its family, the arch families its kernels are built for and\n"
              "its params with what each allows (required, or its default). `kiln get OP --help` shows\n"
              "one op in full; --markdown prints the op reference (docs/ops.md is one).";
  c.options = {{"--json", "", "print the ListOps reply as proto3 JSON (archFamilies, traceDefinition)"},
               {"--markdown", "", "print an op reference in Markdown: one section per family"}};
  c.max_positionals = 1;
  c.run = RunOps;
  commands.push_back(std::move(c));
}

}  // namespace kiln::cli
